#!/usr/bin/python3
"""Makes the importer fixtures of tests/data/import (see README.md there).

    /usr/bin/python3 tests/data/import/make_fixtures.py

- profiler_legacy.json: a real PyTorch profiler Chrome trace of two training steps of a tiny MLP
  on the CPU, recorded with profile_memory=True, record_shapes=True and with_flops=True and
  exported with export_chrome_trace. Debian's torch 1.13 is built without Kineto, so this is the
  legacy autograd profiler's output: a bare array of "X" events without categories, shapes,
  FLOPs or "[memory]" events (it drops them).
- profiler_kineto.json: a Kineto-format trace (what a Kineto build writes) with the fields of
  shared/reference/formats.md section 3: cpu_op and user_annotation spans, a CUDA kernel linked by
  "External id", "[memory]" instant events and deviceProperties. Its ops and timings are taken
  from profiler_legacy.json, so the two describe the same run.
- memory_snapshot.p2.pickle, memory_snapshot.p4.pickle: memory_snapshot.json pickled, as
  _dump_snapshot writes it.
- memory_snapshot.json, chakra.json: small files written field by field after the schemas in
  shared/reference/formats.md (no GPU and no Chakra tools here to record real ones).
- corrupt_*.json: each a copy of a good fixture with one defect.
"""
import json
import os
import pickle

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def profiler_trace():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True,
                                record_shapes=True, with_flops=True) as prof:
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    path = os.path.join(HERE, 'profiler_legacy.json')
    prof.export_chrome_trace(path)
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def kineto_trace(legacy):
    """The legacy events in Kineto's layout, plus what Kineto adds: categories, an optimizer
    annotation, memory events (alloc/free of the activations) and one CUDA kernel."""
    events = []
    for n, e in enumerate(legacy):
        cat = 'user_annotation' if e['name'].startswith(('Optimizer.', 'ProfilerStep')) else 'cpu_op'
        events.append({'ph': 'X', 'cat': cat, 'name': e['name'], 'pid': 1234, 'tid': 1234, 'ts': e['ts'],
                       'dur': e['dur'], 'args': {'External id': n + 1}})
    addmm = next(e for e in events if e['name'] == 'aten::addmm')
    addmm['args']['flops'] = 2 * 8 * 16 * 32
    events.append({'ph': 'X', 'cat': 'kernel', 'name': 'volta_sgemm_32x32', 'pid': 0, 'tid': 7,
                   'ts': addmm['ts'] + 2, 'dur': 5, 'args': {'External id': addmm['args']['External id'], 'stream': 7}})
    total = 4096  # allocated before profiling (the weights)
    for k, (bytes_, ts) in enumerate([(1024, 450), (512, 600), (-1024, 900), (2048, 1000), (-512, 1100), (-2048, 1200)]):
        total += bytes_
        events.append({'ph': 'i', 's': 't', 'cat': 'cpu_instant_event', 'name': '[memory]', 'pid': 1234, 'tid': 1234,
                       'ts': ts, 'args': {'Device Type': 0, 'Device Id': -1, 'Addr': 94000000 + 4096 * (k % 3),
                                          'Bytes': bytes_, 'Total Allocated': total, 'Total Reserved': 16384}})
    return {'schemaVersion': 1, 'deviceProperties': [{'id': 0, 'name': 'NVIDIA A100-SXM4-40GB'}],
            'traceEvents': events, 'traceName': 'synthetic Kineto layout of profiler_legacy.json'}


def memory_snapshot():
    # Two blocks allocated before the history, then alloc/free of activations; one free is
    # requested and completed later (another stream used the block).
    mib = 1 << 20
    base = 0x7f0000000000
    history = [
        {'action': 'segment_alloc', 'addr': base + 0x1000000, 'size': 20 * mib, 'stream': 0, 'time_us': 100},
        {'action': 'alloc', 'addr': base + 0x1000000, 'size': 8 * mib, 'stream': 0, 'time_us': 110},
        {'action': 'alloc', 'addr': base + 0x1800000, 'size': 4 * mib, 'stream': 0, 'time_us': 120},
        {'action': 'free_requested', 'addr': base + 0x1000000, 'size': 8 * mib, 'stream': 0, 'time_us': 130},
        {'action': 'free_completed', 'addr': base + 0x1000000, 'size': 8 * mib, 'stream': 0, 'time_us': 140},
        {'action': 'alloc', 'addr': base + 0x1000000, 'size': 2 * mib, 'stream': 0, 'time_us': 150},
        {'action': 'free_completed', 'addr': base, 'size': 1 * mib, 'stream': 0, 'time_us': 160},
        {'action': 'annotate', 'addr': 0, 'size': 0, 'stream': 0, 'time_us': 161},
    ]
    segments = [
        {'device': 0, 'address': base, 'total_size': 2 * mib, 'allocated_size': 1 * mib, 'active_size': 1 * mib,
         'requested_size': 1 * mib, 'stream': 0, 'segment_type': 'large', 'segment_pool_id': [0, 0],
         'is_expandable': False, 'frames': [],
         'blocks': [{'address': base, 'size': 1 * mib, 'requested_size': 1 * mib, 'state': 'inactive', 'frames': []},
                    {'address': base + mib, 'size': 1 * mib, 'requested_size': 1 * mib, 'state': 'active_allocated', 'frames': []}]},
        {'device': 0, 'address': base + 0x1000000, 'total_size': 20 * mib, 'allocated_size': 6 * mib,
         'active_size': 6 * mib, 'requested_size': 6 * mib, 'stream': 0, 'segment_type': 'large',
         'segment_pool_id': [0, 0], 'is_expandable': False, 'frames': [],
         'blocks': [{'address': base + 0x1000000, 'size': 2 * mib, 'requested_size': 2 * mib, 'state': 'active_allocated', 'frames': []},
                    {'address': base + 0x1200000, 'size': 6 * mib, 'requested_size': 0, 'state': 'inactive', 'frames': []},
                    {'address': base + 0x1800000, 'size': 4 * mib, 'requested_size': 4 * mib, 'state': 'active_pending_free', 'frames': []},
                    {'address': base + 0x1c00000, 'size': 8 * mib, 'requested_size': 0, 'state': 'inactive', 'frames': []}]},
    ]
    return {'segments': segments, 'device_traces': [history], 'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': ''}}


def chakra():
    # A forward/backward/optimizer chain with an all-reduce, as protobuf's JSON mapping writes
    # it (lowerCamelCase, int64 as strings) for one node and snake_case for the others.
    def node(i, name, kind, deps, dur, attrs):
        return {'id': i, 'name': name, 'type': kind, 'data_deps': deps, 'ctrl_deps': [],
                'duration_micros': dur, 'attr': attrs}
    nodes = [
        node(10, 'aten::addmm', 'COMP_NODE', [], 12,
             [{'name': 'num_ops', 'int64_val': 4096}, {'name': 'tensor_size', 'uint64_val': 2560}, {'name': 'is_cpu_op', 'bool_val': False}]),
        node(11, 'aten::relu', 'COMP_NODE', [10], 3, [{'name': 'num_ops', 'int64_val': 256}]),
        node(12, 'autograd::engine::evaluate_function: AddmmBackward0', 'COMP_NODE', [11], 20,
             [{'name': 'num_ops', 'uint64_val': 8192}]),
        node(13, 'ncclDevKernel_AllReduce_Sum_f32', 'COMM_COLL_NODE', [12], 40,
             [{'name': 'comm_type', 'int64_val': 0}, {'name': 'comm_size', 'uint64_val': 2176}]),
        {'id': '14', 'name': 'Optimizer.step#SGD.step', 'type': 4, 'dataDeps': ['13'], 'ctrlDeps': [],
         'durationMicros': '5', 'attr': [{'name': 'num_ops', 'int64Val': '1088'}]},
    ]
    return {'global_metadata': {'version': '0.0.4', 'attr': []}, 'nodes': nodes}


def write(name, document):
    with open(os.path.join(HERE, name), 'w', encoding='utf-8') as f:
        json.dump(document, f, indent=1)
        f.write('\n')


def main():
    profile = kineto_trace(profiler_trace())
    write('profiler_kineto.json', profile)
    snapshot = memory_snapshot()
    write('memory_snapshot.json', snapshot)
    # The form _dump_snapshot writes: a pickle (protocol 4 is Python 3.8-3.13's default).
    for protocol in (2, 4):
        with open(os.path.join(HERE, f'memory_snapshot.p{protocol}.pickle'), 'wb') as f:
            pickle.dump(snapshot, f, protocol=protocol)
    with open(os.path.join(HERE, 'memory_snapshot.p4.pickle'), 'rb') as f:
        data = f.read()
    with open(os.path.join(HERE, 'corrupt_snapshot_truncated.pickle'), 'wb') as f:
        f.write(data[: len(data) // 2])
    graph = chakra()
    write('chakra.json', graph)

    bad = json.loads(json.dumps(profile))
    events = bad['traceEvents']
    first_op = next(i for i, e in enumerate(events) if e.get('ph') == 'X' and e.get('cat') == 'cpu_op')
    events[first_op]['dur'] = 'soon'
    write('corrupt_profiler_dur.json', bad)

    bad = json.loads(json.dumps(profile))
    first_mem = next(i for i, e in enumerate(bad['traceEvents']) if e.get('name') == '[memory]')
    del bad['traceEvents'][first_mem]['args']['Bytes']
    write('corrupt_profiler_memory.json', bad)

    bad = json.loads(json.dumps(snapshot))
    bad['device_traces'][0][1]['size'] = -5
    write('corrupt_snapshot_size.json', bad)

    bad = json.loads(json.dumps(graph))
    bad['nodes'][2]['data_deps'] = [99]
    write('corrupt_chakra_dep.json', bad)

    bad = json.loads(json.dumps(graph))
    bad['nodes'][0]['data_deps'] = [12]
    write('corrupt_chakra_cycle.json', bad)

    with open(os.path.join(HERE, 'profiler_legacy.json'), encoding='utf-8') as f:
        text = f.read()
    with open(os.path.join(HERE, 'corrupt_truncated.json'), 'w', encoding='utf-8') as f:
        f.write(text[: len(text) // 2])


if __name__ == '__main__':
    main()
