#!/usr/bin/python3
"""Makes the adversarial importer fixtures of tests/data/import (see README.md there): small inputs
that once crashed or silently overflowed the importers. Standard library only:

    /usr/bin/python3 tests/data/import/make_adversarial.py
"""
import json
import os
import pickle

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, document):
    with open(os.path.join(HERE, name), 'w', encoding='utf-8') as f:
        json.dump(document, f, indent=1)
        f.write('\n')


def main():
    # 60 nested pairs whose halves are one object: the pickler writes the second half as a memo
    # reference (BINGET), so the file is a few hundred bytes and the tree it stands for 2^60 leaves.
    value = 0
    for _ in range(60):
        value = (value, value)
    with open(os.path.join(HERE, 'corrupt_pickle_memo_bomb.pickle'), 'wb') as f:
        f.write(pickle.dumps(value, protocol=2))

    # Four allocations of 2^62 bytes: the second one takes the running total past 2^63 - 1.
    write('corrupt_snapshot_overflow.json', {
        'segments': [],
        'device_traces': [[{'action': 'alloc', 'addr': 4096 * (k + 1), 'size': 2**62, 'time_us': k}
                           for k in range(4)]],
    })

    # A [memory] event that frees -2^63 bytes: Total Allocated - Bytes (the bytes allocated before
    # the first event) is 5120 + 2^63.
    write('corrupt_profiler_bytes_overflow.json', {'traceEvents': [
        {'ph': 'X', 'cat': 'cpu_op', 'name': 'aten::empty', 'pid': 1, 'tid': 1, 'ts': 100, 'dur': 5},
        {'ph': 'i', 's': 't', 'cat': 'cpu_instant_event', 'name': '[memory]', 'pid': 1, 'tid': 1, 'ts': 102,
         'args': {'Device Type': 0, 'Device Id': -1, 'Addr': 94000000, 'Bytes': -2**63, 'Total Allocated': 5120}},
    ]})


if __name__ == '__main__':
    main()
