"""Measures a platform's host.torch_save_bandwidth: the rate one process's torch.save reaches.

Usage: python3 calibrate/torch_save_rate.py [--folder DIR] [--tensors 16] [--mib 64] [--repeats 5]

With CUDA the state dict lives on the GPU and torch.save copies each storage to host memory as a
DeepSpeed checkpoint does; without it (a CPU-only host), the tensors are on the CPU and each is
first copied into freshly allocated memory, which is what storage.cpu() adds. The figure is the
whole save (pickling, the copies, CRC-32, the writes into the page cache, no fsync) over its
bytes, best of the repeats. DIR should be fast enough not to matter (tmpfs, /dev/shm, or a disk
array): the simulator adds the storage's own time (sim/README.md, "Data loading and
checkpoints"). Both wall time and process CPU time are printed; on a loaded machine use the CPU
time (without CUDA it is the whole save's).
"""

import argparse
import os
import time

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", default="/dev/shm")
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--mib", type=int, default=64, help="MiB per tensor")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    state = {f"t{i}": torch.randn(args.mib * 2**20 // 4, device=device) for i in range(args.tensors)}
    total = args.tensors * args.mib * 2**20
    path = os.path.join(args.folder, "torch_save_rate.pt")

    def save():
        # Without CUDA, what .cpu() of a GPU storage does: a fresh allocation and a copy.
        to_save = state if cuda else {k: v.clone() for k, v in state.items()}
        with open(path, "wb") as f:
            torch.save(to_save, f)

    best_wall = best_cpu = float("inf")
    for _ in range(args.repeats):
        if cuda:
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter(), time.process_time()
        save()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    os.remove(path)
    print(f"torch {torch.__version__}, tensors on {device}: {total / 2**30:.2f} GiB per save, best of {args.repeats}")
    print(f"  wall {best_wall:.3f} s: {total / best_wall / 1e9:.3f} GB/s")
    print(f"  cpu  {best_cpu:.3f} s: {total / best_cpu / 1e9:.3f} GB/s")


if __name__ == "__main__":
    main()
