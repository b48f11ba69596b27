"""Short real trainings with compressed activations: accuracy and memory per bound policy.

    PYTHONPATH=build/kernels/python /usr/bin/python3 -m comptrain_codecs.digits_training \\
        --comptrain build/cli/comptrain --svg digits.svg

Issue 16, item 5b. The data: scikit-learn's bundled handwritten digits (1797 8x8 images, 10
classes; sklearn.datasets.load_digits reads a file shipped in the package, offline; Debian's
python3-sklearn). A fixed split (seed 0): 1437 training images, 360 test images. Two models from
gradient_error_check: SmallCNN on the images upsampled to 16x16 (bilinear), and SmallTransformer
reading each image as 8 tokens (its rows) of 8 features. Adam (lr 2e-3), batch 64, cross-entropy.

Policies, each trained from the same initial weights on the same batches:
  none           no compression;
  fixed E        szp at relative bound E (of each tensor's range) on the conv/linear inputs that
                 `comptrain simulate` compresses for the rule `inputs_of: [conv, linear]` on the
                 capture below (the model's input, which the caller holds anyway, is not one);
  adaptive A     szp, each conv/linear input at its own relative bound: the bound
                 `comptrain simulate` gives for `error_bound: adaptive, gradient_error_tolerance: A`
                 (the largest bound whose predicted weight-gradient error is A of the layer's
                 gradient RMS) on a capture of the same model at the training batch (the capture's
                 step: the initial weights, random inputs and labels). One source of truth: the
                 bounds are the CLI's, nothing here computes them.
What is compressed: the memory of every conv/linear input, for all of its readers (a ReLU's
saved output that the next convolution also saves is one stream): the deployment of an
`inputs_of: [conv, linear]` rule. Found once by a reference pass (gradient_error_check.
saves_sharing); the graph is the same at every step.

Memory: per step, the bytes of the tensors packed and of their streams, and what the graph held
less at the end of forward (CompressionStats.held_bytes_saved), against the bytes of every float
tensor autograd saved (the reference pass). Accuracy: test accuracy after every epoch.

Exits 77 when scikit-learn is not installed (scripts/setup.sh installs python3-sklearn), 2 on bad
input.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch

from .activations import compressed_activations
from . import gradient_error_check as gec

IMAGE = 16  # the CNN's input side: the 8x8 digits upsampled twice


def digits_cnn():
    return gec.SmallCNN(channels=1, classes=10)


def digits_transformer():
    return gec.SmallTransformer(features=8, dim=64, heads=4, depth=2, classes=10)


MODELS = {
    # name: (factory, per-sample input shape for the capture)
    "cnn": ("digits_cnn", f"1,{IMAGE},{IMAGE}"),
    "transformer": ("digits_transformer", "8,8"),
}


def load_data(seed):
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32) / 16.0  # pixel values 0..16
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    test, train = order[:360], order[360:]
    return (x[train], y[train]), (x[test], y[test])


def model_input(name, x):
    if name == "cnn":
        return torch.nn.functional.interpolate(x.unsqueeze(1), size=(IMAGE, IMAGE), mode="bilinear",
                                               align_corners=False)
    return x  # [batch, 8 rows (tokens), 8 pixels (features)]


def make_model(name, seed):
    torch.manual_seed(seed)
    return getattr(sys.modules[__name__], MODELS[name][0])()


def cli_bounds(comptrain, capture_path, name, batch, seed, workdir, bound=None, tolerance=None):
    """{conv/linear module path: relative bound} from `comptrain simulate` of a compress rule on
    `inputs_of: [conv, linear]` (szp at a fixed relative `bound`, or adaptive for `tolerance`) on a
    capture of the model (factory seeded like make_model) at the training batch: the storages the
    rule compresses (the model's input, which the caller holds, is not one) and their bounds."""
    if not capture_path or not os.path.isfile(capture_path):
        raise gec.CheckError(f"capture script not found: {capture_path!r} (--capture or $COMPTRAIN_CAPTURE)")
    factory, shape = MODELS[name]
    trace = os.path.join(workdir, f"{name}.json")
    if not os.path.exists(trace):
        done = subprocess.run([sys.executable, capture_path, f"comptrain_codecs.digits_training:{factory}", "--batch", str(batch),
                               "--input-shape", shape, "--num-classes", "10", "--seed", str(seed), "--threads", "1",
                               "-o", trace], capture_output=True, text=True)
        if done.returncode != 0:
            raise gec.CheckError(f"capture of {name} failed: {done.stderr.strip()[-2000:]}")
    listed = gec.predict(comptrain, trace, batch, bound, "a100-40gb", workdir, tolerance=tolerance)
    modules = gec.layer_modules(make_model(name, seed))
    bounds = {}
    for entry in listed:
        for op in entry["layers"]:
            path = gec.module_of_op(op, modules)
            if path is not None:
                bounds[path] = min(bounds.get(path, math.inf), entry["relative_error_bound"])
    return bounds, listed


def evaluate(model, name, x, y):
    model.eval()
    with torch.no_grad():
        correct = (model(model_input(name, x)).argmax(1) == y).sum().item()
    model.train()
    return correct / len(y)


def train(name, policy, by_module, data, epochs, batch, seed):
    """One training; by_module {conv/linear module path: relative bound} or None (no compression).
    Returns accuracy per epoch and the memory figures of the last epoch (per step, mean)."""
    (xtr, ytr), (xte, yte) = data
    model = make_model(name, seed)
    modules = gec.layer_modules(model)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    _, saves = gec.reference_step(model, modules, model_input(name, xtr[:batch]), ytr[:batch])
    by_save = gec.saves_sharing(saves, by_module) if by_module is not None else {}
    saved_float_bytes = None
    order_gen = torch.Generator().manual_seed(seed + 1)
    accuracy, memory = [], []
    for epoch in range(epochs):
        order = torch.randperm(len(ytr), generator=order_gen)
        last = []
        for start in range(0, len(ytr) - batch + 1, batch):  # whole batches only: a fixed graph
            index = order[start:start + batch]
            x, y = model_input(name, xtr[index]), ytr[index]
            opt.zero_grad(set_to_none=True)
            hooks = compressed_activations("szp", 1e-2, "rel", bounds=lambda info: by_save.get((info.module, info.index)),
                                           module=model, min_bytes=0)
            with hooks as stats:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                held_saved = stats.held_bytes_saved()
            loss.backward()
            opt.step()
            last.append((stats.original_bytes, stats.compressed_bytes, held_saved))
        accuracy.append(evaluate(model, name, xte, yte))
        memory = last
    if saved_float_bytes is None:
        saved_float_bytes = float_bytes_saved(model, name, xtr[:batch], ytr[:batch])
    n = len(memory)
    return {"name": name, "policy": policy, "accuracy": accuracy,
            "packed_bytes": sum(m[0] for m in memory) / n, "stream_bytes": sum(m[1] for m in memory) / n,
            "held_bytes_saved": sum(m[2] for m in memory) / n, "saved_float_bytes": saved_float_bytes}


def float_bytes_saved(model, name, x, y):
    """Bytes of the distinct float32 memories autograd saves in one step (parameters excluded):
    what an uncompressed step holds for backward."""
    seen = {}

    def pack(t):
        if t.dtype == torch.float32 and not (t.requires_grad and t.is_leaf) and \
                not (t._base is not None and t._base.requires_grad and t._base.is_leaf):
            storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
            seen[storage.data_ptr()] = storage.nbytes() if hasattr(storage, "nbytes") else storage.size() * 4
        return t
    params = {p.data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = torch.nn.functional.cross_entropy(model(model_input(name, x)), y)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(b for a, b in seen.items() if a not in params)


def plot(results, path):
    """An SVG through gnuplot: test accuracy per epoch, one panel per model, one line per policy."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        raise gec.CheckError("gnuplot not found (scripts/setup.sh installs gnuplot-nox)")
    names = list(dict.fromkeys(r["name"] for r in results))
    policies = list(dict.fromkeys(r["policy"] for r in results))
    with tempfile.TemporaryDirectory() as tmp:
        script = [f"set terminal svg size {480 * len(names)},400 dynamic font 'sans,11'",
                  f"set output {json.dumps(os.path.abspath(path))}",
                  f"set multiplot layout 1,{len(names)}",
                  "set xlabel 'epoch'", "set ylabel 'test accuracy (360 digits)'", "set key bottom right",
                  "set grid", "set yrange [0.4:1]"]
        for name in names:
            plots = []
            for k, policy in enumerate(policies):
                r = next((r for r in results if r["name"] == name and r["policy"] == policy), None)
                if r is None:
                    continue
                data = os.path.join(tmp, f"{name}-{k}.dat")
                with open(data, "w", encoding="utf-8") as f:
                    for epoch, acc in enumerate(r["accuracy"], 1):
                        f.write(f"{epoch} {acc}\n")
                plots.append(f"{json.dumps(data)} using 1:2 with linespoints title {json.dumps(policy)}")
            script.append(f"set title {json.dumps('small ' + name + ' on sklearn digits')}")
            script.append("plot " + ", ".join(plots))
        script.append("unset multiplot")
        done = subprocess.run([gnuplot], input="\n".join(script) + "\n", capture_output=True, text=True)
        if done.returncode != 0:
            raise gec.CheckError(f"gnuplot failed: {done.stderr.strip()}")


def markdown(results):
    lines = ["| model | policy | test accuracy: final, mean of the last 5 epochs (best) | saved float bytes / step "
             "| conv/linear inputs packed | compressed to | ratio | held less after forward |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        ratio = r["packed_bytes"] / r["stream_bytes"] if r["stream_bytes"] else None
        tail = r["accuracy"][-5:]
        lines.append(f"| {r['name']} | {r['policy']} | {r['accuracy'][-1]:.3f}, {sum(tail) / len(tail):.3f} "
                     f"({max(r['accuracy']):.3f}) | "
                     f"{r['saved_float_bytes'] / 1024:.0f} KiB | {r['packed_bytes'] / 1024:.0f} KiB | "
                     f"{r['stream_bytes'] / 1024:.1f} KiB | {f'{ratio:.2f}x' if ratio else '-'} | "
                     f"{r['held_bytes_saved'] / 1024:.0f} KiB |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description="Train small models on scikit-learn's digits with compressed "
                                            "activations under several bound policies (issue 16, item 5b).")
    p.add_argument("--models", default="cnn,transformer")
    p.add_argument("--fixed", default="1e-3,1e-2,1e-1", help="fixed relative szp bounds")
    p.add_argument("--tolerances", default="0.01,0.1", help="adaptive gradient-error tolerances")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--comptrain", default=os.environ.get("COMPTRAIN_CLI") or shutil.which("comptrain"))
    p.add_argument("--capture", default=os.environ.get("COMPTRAIN_CAPTURE", "traces/capture/comptrain_capture.py"))
    p.add_argument("--svg", help="write the accuracy curves here")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    try:
        import sklearn.datasets  # noqa: F401
    except ImportError as e:
        print(f"digits_training: {e}: skipped (scripts/setup.sh installs python3-sklearn)", file=sys.stderr)
        return 77
    try:
        models = [m for m in args.models.split(",") if m]
        unknown = [m for m in models if m not in MODELS]
        if unknown:
            raise gec.CheckError(f"--models: unknown {unknown}; expected some of {sorted(MODELS)}")
        fixed = [float(b) for b in args.fixed.split(",") if b]
        tolerances = [float(a) for a in args.tolerances.split(",") if a]
        if not args.comptrain or not os.path.isfile(args.comptrain):
            raise gec.CheckError(f"--comptrain: the comptrain CLI not found ({args.comptrain!r}); it gives the "
                                 f"tensors to compress and the adaptive bounds")
        torch.set_num_threads(args.threads)
        data = load_data(args.seed)
        results, bounds_used = [], {}
        with tempfile.TemporaryDirectory() as workdir:
            for name in models:
                policies = [("none", None)]
                for e in fixed:
                    by_module, _ = cli_bounds(args.comptrain, args.capture, name, args.batch, args.seed, workdir,
                                              bound=e)
                    policies.append((f"fixed {e:g}", by_module))
                for a in tolerances:
                    by_module, _ = cli_bounds(args.comptrain, args.capture, name, args.batch, args.seed, workdir,
                                              tolerance=a)
                    policies.append((f"adaptive {a:g}", by_module))
                    bounds_used[f"{name} adaptive {a:g}"] = by_module
                for policy, by_module in policies:
                    r = train(name, policy, by_module, data, args.epochs, args.batch, args.seed)
                    results.append(r)
                    print(f"{name:12s} {policy:14s} accuracy {' '.join(f'{a:.3f}' for a in r['accuracy'])}",
                          file=sys.stderr)
        print(markdown(results))
        for key, b in bounds_used.items():
            print(f"\n{key}: " + ", ".join(f"{m} {v:.3g}" for m, v in b.items()))
        if args.svg:
            plot(results, args.svg)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"results": results, "adaptive_bounds": bounds_used}, f, indent=1)
    except gec.CheckError as e:
        print(f"digits_training: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
