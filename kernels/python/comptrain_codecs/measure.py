"""Memory saved and CPU time spent by compressed_activations on real training steps.

For each model, runs forward + backward steps alternately without and with the hooks (one run,
interleaved, so that the machine's load moves both alike) and prints a Markdown table:

  saved tensors: what the hooks packed, their bytes before and after compression, the ratio;
  held after forward: what the graph held at the end of forward as the hooks count it
    (CompressionStats.held_bytes_saved: originals freed minus streams held) and as the C
    allocator counts it (glibc mallinfo2: bytes in use, without minus with the hooks);
  CPU time per step (process CPU time, every thread) without and with, their ratio, and the
    CPU time spent in the hooks (compression, decompression, bookkeeping) in the last step.

    PYTHONPATH=build/kernels/python /usr/bin/python3 -m comptrain_codecs.measure [--models small,resnet18]

Inputs are smooth synthetic images (a 7x7 random field upsampled bilinearly, plus 10% noise) and
random labels; the weights are PyTorch's default initialisation. kernels/README.md ("Python")
has the figures of the development machine.
"""

import argparse
import ctypes
import gc
import statistics
import sys
import time

import torch

from .activations import compressed_activations


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _malloc_in_use():
    """Bytes glibc's allocator has handed out (heap + mmapped blocks), or None off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def small_model():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(32 * 16 * 16, 10)), (3, 32, 32)


def resnet18():
    import torchvision

    return torchvision.models.resnet18(num_classes=1000), (3, 224, 224)


MODELS = {"small": small_model, "resnet18": resnet18}


def smooth_images(batch, shape, generator):
    channels, height, width = shape
    field = torch.randn(batch, channels, 7, 7, generator=generator)
    images = torch.nn.functional.interpolate(field, size=(height, width), mode="bilinear", align_corners=False)
    return images + 0.1 * torch.randn(batch, channels, height, width, generator=generator)


def step(model, images, labels, context):
    """One forward + backward; returns (CPU seconds, malloc bytes in use after forward, stats)."""
    model.zero_grad(set_to_none=True)
    gc.collect()
    start = time.process_time()
    stats = context.__enter__() if context else None
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    in_use = _malloc_in_use()
    held = stats.held_bytes_saved() if stats else None
    loss.backward()
    if context:
        context.__exit__(None, None, None)
    seconds = time.process_time() - start
    return seconds, in_use, held, stats


def measure(name, batch, steps, codec, error_bound, mode, threads):
    torch.manual_seed(0)
    model, shape = MODELS[name]()
    g = torch.Generator().manual_seed(1)
    images = smooth_images(batch, shape, g)
    labels = torch.randint(0, 10, (batch,), generator=g)
    step(model, images, labels, None)  # warm-up: oneDNN's kernels, the allocator's pools
    base_times, comp_times, base_use, comp_use, helds = [], [], [], [], []
    stats = None
    for _ in range(steps):
        seconds, in_use, _, _ = step(model, images, labels, None)
        base_times.append(seconds)
        base_use.append(in_use)
        context = compressed_activations(codec, error_bound, mode, module=model, threads=threads)
        seconds, in_use, held, stats = step(model, images, labels, context)
        comp_times.append(seconds)
        comp_use.append(in_use)
        helds.append(held)
    mib = 2.0 ** 20
    base_t, comp_t = statistics.median(base_times), statistics.median(comp_times)
    malloc_saved = (statistics.median(base_use) - statistics.median(comp_use)) / mib if None not in base_use else float("nan")
    return {
        "model": name,
        "batch": batch,
        "packed": stats.tensors_packed,
        "passed": sum(stats.passed_through.values()),
        "original_mib": stats.original_bytes / mib,
        "compressed_mib": stats.compressed_bytes / mib,
        "ratio": stats.ratio,
        "held_saved_mib": statistics.median(helds) / mib,
        "malloc_saved_mib": malloc_saved,
        "base_s": base_t,
        "comp_s": comp_t,
        "time_ratio": comp_t / base_t,
        "hooks_s": stats.hooks_cpu_seconds,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="small,resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="steps without and with the hooks (medians)")
    parser.add_argument("--codec", default="szp")
    parser.add_argument("--error-bound", type=float, default=1e-2)
    parser.add_argument("--mode", default="rel")
    parser.add_argument("--threads", type=int, default=1, help="torch's and the codecs' threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.codec} {args.mode} {args.error_bound}, "
          f"batch {args.batch}, medians of {args.steps} steps; MiB = 2^20 bytes", file=sys.stderr)
    print("| model | batch | tensors packed / passed | saved tensors MiB | compressed MiB | ratio | held saved after "
          "forward MiB (hooks) | malloc in use after forward, saved MiB | CPU s/step without | with | ratio | "
          "in the hooks, CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        r = measure(name, args.batch, args.steps, args.codec, args.error_bound, args.mode, args.threads)
        print(f"| {r['model']} | {r['batch']} | {r['packed']} / {r['passed']} | {r['original_mib']:.1f} | "
              f"{r['compressed_mib']:.1f} | {r['ratio']:.2f} | {r['held_saved_mib']:.1f} | {r['malloc_saved_mib']:.1f} | "
              f"{r['base_s']:.3f} | {r['comp_s']:.3f} | {r['time_ratio']:.2f} | {r['hooks_s']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
