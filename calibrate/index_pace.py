"""Measures the paces of PyTorch's indexed kernels on this GPU, in elements per SM per clock,
beside the op-time model's constants (models/README.md, "Kernel traffic"):

  index_select  [rows, width] gathered from as many rows by a uniform random index (an
                embedding's forward, an index_add_'s gradient): kIndexSelectElementsPerSmCycle
  index_add_    [rows, width] added into as many rows by a uniform random index along dim 0
                (the case of pytorch/pytorch#175760): kScatterAddElementsPerSmCycle
  scatter_add_  the same through scatter_add_ with the index expanded over the row (Megatron's
                unpermutation, a torch.gather's gradient): kScatterAddElementsPerSmCycle

Usage: /usr/bin/python3 calibrate/index_pace.py [--rows 4000000] [--width 128] [--dtype bf16]
           [--repeats 20] [--clock-ghz G] [--skip-without-cuda]

Pace = elements / (median seconds per call x SMs x clock). The clock is the one the model
derives from a platform's fp32 peak, the GPU's maximum SM clock (nvidia-smi's clocks.max.sm;
--clock-ghz to give it). A pace far from the model's constant on your GPU is a reason to
distrust the model's gathers and scatters there (the constants are not platform fields).
Exit 2 on bad arguments or without a CUDA device (0 with --skip-without-cuda: it says so).
"""

import argparse
import os
import re
import subprocess
import sys

OP_TIME = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'models', 'src', 'op_time.cpp')
CONSTANTS = {'index_select': 'kIndexSelectElementsPerSmCycle', 'index_add_': 'kScatterAddElementsPerSmCycle',
             'scatter_add_': 'kScatterAddElementsPerSmCycle'}
DTYPES = {'bf16': 'bfloat16', 'fp16': 'float16', 'fp32': 'float32'}


def fail(message):
    print(f'index_pace: {message}', file=sys.stderr)
    sys.exit(2)


def model_paces():
    """The op-time model's paces, read from its source so that they cannot drift apart."""
    try:
        with open(OP_TIME, encoding='utf-8') as f:
            source = f.read()
    except OSError as e:
        fail(f'{OP_TIME}: {e.strerror}: the script reads the model\'s paces from the source tree')
    paces = {}
    for kernel, constant in CONSTANTS.items():
        match = re.search(rf'constexpr double {constant} = ([0-9.]+);', source)
        if not match:
            fail(f'{OP_TIME}: no "constexpr double {constant} = ...;" line')
        paces[kernel] = float(match.group(1))
    return paces


def max_sm_clock_hz(device_index):
    try:
        out = subprocess.run(['nvidia-smi', '--query-gpu=clocks.max.sm', '--format=csv,noheader,nounits',
                              '-i', str(device_index)], capture_output=True, text=True, timeout=30, check=True).stdout
        return float(out.strip().splitlines()[0]) * 1e6
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def median_seconds(torch, call, repeats):
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--rows', type=int, default=4_000_000)
    parser.add_argument('--width', type=int, default=128)
    parser.add_argument('--dtype', choices=sorted(DTYPES), default='bf16')
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--clock-ghz', type=float, help='the SM clock the model takes (default: nvidia-smi clocks.max.sm)')
    parser.add_argument('--skip-without-cuda', action='store_true', help='exit 0 (saying so) where there is no CUDA device')
    args = parser.parse_args()
    if not 1 <= args.rows <= 2**31 - 1 or not 1 <= args.width <= 65536 or not 1 <= args.repeats <= 10000:
        fail(f'--rows {args.rows}, --width {args.width}, --repeats {args.repeats}: expected 1..2^31-1, 1..65536 and 1..10000')
    if args.clock_ghz is not None and not 0.01 <= args.clock_ghz <= 10:
        fail(f'--clock-ghz {args.clock_ghz}: expected a clock between 0.01 and 10 GHz')
    model = model_paces()

    import torch
    if not torch.cuda.is_available():
        message = f'torch {torch.__version__} sees no CUDA device; nothing measured'
        if args.skip_without_cuda:
            print(f'index_pace: skipped: {message}')
            return
        fail(message)
    device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    clock = args.clock_ghz * 1e9 if args.clock_ghz is not None else max_sm_clock_hz(device)
    if clock is None:
        fail('nvidia-smi gave no clocks.max.sm for this GPU: give --clock-ghz')
    dtype = getattr(torch, DTYPES[args.dtype])
    rows, width = args.rows, args.width
    index = torch.randint(0, rows, (rows,), device='cuda')
    expanded = index.view(-1, 1).expand(rows, width)
    source = torch.randn(rows, width, device='cuda').to(dtype)
    destination = torch.zeros(rows, width, device='cuda', dtype=dtype)
    calls = {
        'index_select': lambda: torch.index_select(source, 0, index),
        'index_add_': lambda: destination.index_add_(0, index, source),
        'scatter_add_': lambda: destination.scatter_add_(0, expanded, source),
    }
    elements = rows * width
    print(f'{props.name}: {props.multi_processor_count} SMs at {clock / 1e9:.3f} GHz; torch {torch.__version__}; '
          f'[{rows}, {width}] {args.dtype}, median of {args.repeats}')
    print(f'  {"kernel":<14}{"ms":>10}{"elements/SM/clock":>20}{"model":>8}{"model/measured":>16}')
    for name, call in calls.items():
        seconds = median_seconds(torch, call, args.repeats)
        pace = elements / (seconds * props.multi_processor_count * clock)
        print(f'  {name:<14}{seconds * 1e3:>10.3f}{pace:>20.3f}{model[name]:>8.3f}{model[name] / pace:>16.2f}')


if __name__ == '__main__':
    main()
