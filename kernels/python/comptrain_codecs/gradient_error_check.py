"""Measured weight-gradient error of compressed activations against comptrain's prediction.

    PYTHONPATH=build/kernels/python /usr/bin/python3 -m comptrain_codecs.gradient_error_check \\
        resnet18 --batch 4 --bounds 1e-3,1e-2 --comptrain build/cli/comptrain

For one model and one captured training step (issue 16, item 5a):

 1. Capture. traces/capture/comptrain_capture.py (loaded from --capture) records the step with
    gradient statistics, exactly as its command line does (a probe step at batch +-1, which also
    updates the weights, then the recorded step). Before the recorded step the weights and torch's
    random state are copied, so that the measurement below runs on the same weights and the same
    batch (the step draws its inputs and labels first thing, then its dropout masks: every pass
    below starts from the random state after the inputs, so all see the recorded masks). The
    reference pass's RMS(G) is compared with the capture's; a difference is printed as a warning
    (and is in the result's statistics_mismatch).
 2. Prediction, from the real CLI. For each bound, a scenario compresses `inputs_of: [conv,
    linear]` with szp at that relative bound (profile-driven: `profile: auto`); `comptrain simulate
    --json` lists, per compressed storage, its absolute bound, the conv/linear layers it enters
    (the most sensitive first), predicted_relative_gradient_error (sigma / RMS(G) of that layer)
    and relu_mask_not_modelled (sim/README.md, JSON schema 5). Nothing of the model is computed
    here.
 3. Measurement. With the weights and batch of step 1: one forward + backward without
    compression (the reference), then with comptrain_codecs.compressed_activations (szp, 'abs',
    each storage at the absolute bound the CLI gave it), and the relative error
    ||G - G_ref|| / ||G_ref|| of each weight gradient (the RMS of the difference over the RMS
    of the gradient: what sigma / RMS(G) predicts). Two compressed runs:
      'weight path'  only the saves made by the consuming conv/linear modules are compressed:
                     exactly what the prediction covers (the error reaches G alone);
      'all readers'  also the other saves of the same memory (a ReLU's saved output, which its
                     backward reads as a mask; a pooling layer's input): the deployment, where
                     the storage is compressed once for every reader; the prediction does not
                     cover the extra error (flagged [r] by the CLI);
      'all readers, mask kept'  the same with positive_mask='relu': the streams of the tensors a
                     ReLU produced keep one bit per value, x > 0, so a ReLU's backward reads
                     its exact mask (kernels/README.md, "Positive mask"); what `error_bound:
                     adaptive` deploys (flagged [m] by the CLI).

Mapping trace layers to torch modules. A trace op is named `<module path>.<aten op>` by the
capture (`layer1.0.conv1.convolution`, `fc.addmm`); the module is the longest dot-prefix of the
op name that is a conv/linear module of the model. A compressed storage's saves are recognised
in the hooks by the module that makes them (SavedTensorInfo.module), so the conv/linear modules
of a storage's `layers` get its bound. In the 'all readers' run the other saves of that memory are
found in the reference pass: every save is recorded by (module path, index within the module's
call) with its storage's address (saved memory stays alive until backward, so addresses are not
reused during forward); the saves sharing an address with a consumer's save get the same bound.

The CLI predicts for the most sensitive consumer of a storage (the first of `layers`); the table
compares it with that layer's measured error and lists the other consumers' errors beside.

Exit status: 0, or 2 on bad input (a missing CLI or capture script, a failed simulation).
"""

import argparse
import copy
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch

from .activations import compressed_activations


# -- small models for the check and its test ---------------------------------------------------
class SmallCNN(torch.nn.Module):
    """Two convolutions with ReLUs, a pooling and a classifier, for 3x16x16 inputs."""

    def __init__(self, channels=3, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, 16, 3, padding=1)
        self.relu1 = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.relu2 = torch.nn.ReLU()
        self.pool = torch.nn.AdaptiveAvgPool2d(4)
        self.fc = torch.nn.Linear(32 * 16, classes)

    def forward(self, x):
        x = self.relu2(self.conv2(self.relu1(self.conv1(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


class Block(torch.nn.Module):
    """A pre-norm transformer block from torch primitives: multi-head attention by matmul and
    softmax (no fused kernel, so the capture sees the products), dropout on the attention
    probabilities, GELU MLP."""

    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(4 * dim, dim)
        # Dropout on the attention probabilities (read by a matmul, not a linear layer): random
        # masks in the forward pass, which the check must replay (gradient_error_check's test).
        self.drop = torch.nn.Dropout(dropout) if dropout else torch.nn.Identity()
        # The attention scale as a buffer, not a Python number: the capture (torch 1.13) fails
        # on the wrapped-number tensor that `scores / 8.0` saves for its backward.
        self.register_buffer("scale", torch.tensor(1 / math.sqrt(dim // heads)))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.scale, dim=-1)
        x = x + self.proj(torch.matmul(self.drop(a), v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class SmallTransformer(torch.nn.Module):
    """Inputs [batch, tokens, features]: an input projection, `depth` blocks, a final norm,
    the mean over tokens and a classifier."""

    def __init__(self, features=16, dim=64, heads=4, depth=2, classes=10, dropout=0.0):
        super().__init__()
        self.embed = torch.nn.Linear(features, dim)
        self.blocks = torch.nn.Sequential(*[Block(dim, heads, dropout) for _ in range(depth)])
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(x))).mean(dim=1))


def small_cnn():
    return SmallCNN()


def small_transformer():
    return SmallTransformer(dropout=0.1)


# -- the check ---------------------------------------------------------------------------------
class CheckError(Exception):
    """Bad input or a failed tool: exit 2 with the message."""


def load_capture(path):
    if not path or not os.path.isfile(path):
        raise CheckError(f"capture script not found: {path!r} (expected traces/capture/comptrain_capture.py; "
                         f"--capture or $COMPTRAIN_CAPTURE)")
    spec = importlib.util.spec_from_file_location("comptrain_capture", path)
    capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capture)
    return capture


def capture_step(capture, cap_args, trace_path):
    """Runs the capture as its main() does and returns (session, trace, x, y, random state after
    x and y), the model holding the recorded step's weights. The probe step comes first (it
    changes the weights); the recorded step draws x, y, then its dropout masks."""
    session = capture.Session(cap_args)
    probe_batch = cap_args.batch - 1 if cap_args.batch > 1 else 2
    probe = session.step(probe_batch, keep_saved=False)
    weights = copy.deepcopy(session.model.state_dict())
    rng = torch.get_rng_state()
    main_run = session.step(cap_args.batch, keep_saved=False, record_values=True, record_gradients=True)
    trace = capture.build_trace(session, main_run, probe, cap_args.batch, probe_batch)
    with open(trace_path, "w", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"))
    # The recorded step's inputs: the same draws from the same random state (Session.step draws
    # x then y before anything else).
    after = torch.get_rng_state()
    torch.set_rng_state(rng)
    shape = [cap_args.batch] + [int(s) for s in cap_args.input_shape.split(",")]
    x = torch.randn(shape, dtype=session.dtype)
    y = torch.randint(0, cap_args.num_classes, (cap_args.batch,))
    # The forward pass's own draws (dropout masks) follow: every pass below starts from this
    # state, so they all see the recorded step's masks.
    forward_rng = torch.get_rng_state()
    torch.set_rng_state(after)
    session.model.load_state_dict(weights)
    return session, trace, x, y, forward_rng


def predict(comptrain, trace_path, batch, bound, platform, workdir, tolerance=None):
    """`comptrain simulate --json` on a scenario compressing conv/linear inputs with szp at a
    fixed relative bound (or, with `tolerance`, the adaptive bound for that gradient-error
    tolerance); returns the compression rule's per-storage list."""
    name = f"adaptive-{tolerance:g}" if tolerance is not None else f"szp-{bound:g}"
    clause = (f"error_bound: adaptive, gradient_error_tolerance: {tolerance!r}" if tolerance is not None
              else f"error_bound: {bound!r}")
    scenario = os.path.join(workdir, f"check-{name}.yaml")
    with open(scenario, "w", encoding="utf-8") as f:
        f.write(f"name: gradient-error-check\n"
                f"model: {{trace: {json.dumps(os.path.abspath(trace_path))}}}\n"
                f"training: {{batch_size: {batch}}}\n"
                f"platform: {platform}\n"
                f"strategy:\n  name: {name}\n  rules:\n"
                f"    - select: {{inputs_of: [conv, linear]}}\n"
                f"      compress: {{profile: auto, codec: szp, {clause}}}\n")
    done = subprocess.run([comptrain, "simulate", scenario, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        raise CheckError(f"{comptrain} simulate {scenario} failed (exit {done.returncode}): {done.stderr.strip()}")
    try:
        report = json.loads(done.stdout)
        rules = report["compression"]
    except (ValueError, KeyError) as e:
        raise CheckError(f"{comptrain} simulate --json: no compression list in its output ({e})")
    if len(rules) != 1:
        raise CheckError(f"{comptrain} simulate --json: expected one compression rule, found {len(rules)}")
    return rules[0]["tensors"]


def layer_modules(model):
    return {name: m for name, m in model.named_modules()
            if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear))}


def module_of_op(op_name, modules):
    """The conv/linear module a trace op belongs to: the longest dot-prefix of its name."""
    parts = op_name.split(".")
    for k in range(len(parts) - 1, 0, -1):
        path = ".".join(parts[:k])
        if path in modules:
            return path
    return None


def weight_grads(model, modules, x, y, hooks=None, rng=None):
    model.zero_grad(set_to_none=True)
    if rng is not None:
        torch.set_rng_state(rng)  # the same dropout masks in every pass
    if hooks is None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
    else:
        with hooks:
            loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    grads = {name: m.weight.grad.detach().clone() for name, m in modules.items()}
    model.zero_grad(set_to_none=True)
    return grads


def reference_step(model, modules, x, y, rng=None):
    """One forward + backward without compression: the weight gradients, and every save autograd
    made as (module path, index in the module's call, storage address). The hooks pass every
    tensor through (their bounds callable answers None) and are there for the module paths."""
    saves = []

    def record(info):
        t = info.tensor
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        saves.append((info.module, info.index, storage.data_ptr()))
        return None
    grads = weight_grads(model, modules, x, y,
                         compressed_activations("szp", 1e-3, "abs", bounds=record, module=model, min_bytes=0), rng)
    return grads, saves


def saves_sharing(saves, by_module):
    """{(module, index): bound} for every save of a memory that a module of `by_module` {module
    path: bound} saves (the smallest bound where several do). Saved memory stays alive until
    backward, so within one forward pass an address names one memory."""
    address_bound = {}
    for module, _index, address in saves:
        if module in by_module:
            address_bound[address] = min(address_bound.get(address, math.inf), by_module[module])
    return {(m, i): address_bound[a] for m, i, a in saves if a in address_bound}


def relative_error(g, ref):
    den = float(torch.linalg.vector_norm(ref, dtype=torch.float64))
    num = float(torch.linalg.vector_norm((g - ref).double()))
    return num / den if den > 0 else math.inf


def run_check(model_spec, batch, bounds, comptrain, capture_path, input_shape="3,224,224", num_classes=1000,
              platform="a100-40gb", seed=0, threads=1, workdir=None):
    """Returns {'rows': [...], 'trace': path, ...}: per bound and compressed storage, the
    prediction and the measured errors."""
    capture = load_capture(capture_path)
    if threads:
        torch.set_num_threads(threads)
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="comptrain-gradcheck-")
    try:
        cap_args = capture.parse_args([model_spec, "--batch", str(batch), "-o", os.path.join(workdir, "trace.json"),
                                       "--input-shape", input_shape, "--num-classes", str(num_classes),
                                       "--seed", str(seed)])
        trace_path = cap_args.output
        session, trace, x, y, rng = capture_step(capture, cap_args, trace_path)
        model = session.model
        modules = layer_modules(model)

        ref, saves = reference_step(model, modules, x, y, rng)
        # The capture measured RMS(G) on this step: a check that the weights and batch are the same.
        stats = {}
        tensors = {t["id"]: t for t in trace["tensors"]}
        for op in trace["ops"]:
            if op["phase"] == "forward" and op["kind"] in ("conv", "linear", "matmul"):
                path = module_of_op(op["name"], modules)
                for i in op["inputs"]:
                    g = tensors[i].get("gradient")
                    if path and g and "weight_grad_rms" in g:
                        stats.setdefault(path, []).append(g["weight_grad_rms"])
        mismatch = []
        for path, values in stats.items():
            measured = float(torch.linalg.vector_norm(ref[path], dtype=torch.float64)) / math.sqrt(ref[path].numel())
            # The capture keeps only the most sensitive consumer's statistics per tensor: one of
            # them is this module's when the module is listed.
            if min(abs(v - measured) / measured for v in values) > 1e-3:
                mismatch.append(f"{path}: captured {values}, now {measured:.6g}")

        rows, result_layers = [], []
        for bound in bounds:
            listed = predict(comptrain, trace_path, batch, bound, platform, workdir)
            by_module, entries = {}, []
            for entry in listed:
                layers = [module_of_op(name, modules) for name in entry["layers"]]
                if entry["absolute_error_bound"] is None or not layers or None in layers:
                    entries.append((entry, layers, None))
                    continue
                for path in layers:
                    by_module[path] = entry["absolute_error_bound"]
                entries.append((entry, layers, entry["absolute_error_bound"]))
            by_save = saves_sharing(saves, by_module)

            def weight_path(info):
                return by_module.get(info.module)

            def all_readers(info):
                return by_save.get((info.module, info.index))
            hooks_w = compressed_activations("szp", 1e-3, "abs", bounds=weight_path, module=model, min_bytes=0)
            g_w = weight_grads(model, modules, x, y, hooks_w, rng)
            hooks_a = compressed_activations("szp", 1e-3, "abs", bounds=all_readers, module=model, min_bytes=0)
            g_a = weight_grads(model, modules, x, y, hooks_a, rng)
            hooks_m = compressed_activations("szp", 1e-3, "abs", bounds=all_readers, module=model, min_bytes=0,
                                             positive_mask="relu")
            g_m = weight_grads(model, modules, x, y, hooks_m, rng)
            # Every conv/linear layer, covered or not: with the weight path alone compressed, no
            # error enters the data path, so a layer whose input is not compressed must have
            # exactly its reference gradient; with all readers, a ReLU's mask moves the gradients
            # of the layers below it.
            covered = {p for _, layers, eb in entries if eb is not None for p in layers}
            result_layers.append({"bound": bound, "packed_weight_path": hooks_w.stats.tensors_packed,
                                  "packed_all_readers": hooks_a.stats.tensors_packed,
                                  "deduplicated_all_readers": hooks_a.stats.tensors_deduplicated,
                                  "packed_mask_kept": hooks_m.stats.tensors_packed,
                                  "compressed_bytes_all_readers": hooks_a.stats.compressed_bytes,
                                  "compressed_bytes_mask_kept": hooks_m.stats.compressed_bytes,
                                  "layers": {p: {"input_compressed": p in covered,
                                                 "weight_path": relative_error(g_w[p], ref[p]),
                                                 "all_readers": relative_error(g_a[p], ref[p]),
                                                 "mask_kept": relative_error(g_m[p], ref[p])} for p in modules}})
            for entry, layers, eb in entries:
                row = {"bound": bound, "tensor": entry["tensor"], "layers": layers,
                       "relative_error_bound": entry["relative_error_bound"], "absolute_error_bound": eb,
                       "predicted": entry["predicted_relative_gradient_error"],
                       "relu_mask": entry["relu_mask_not_modelled"]}
                if eb is not None:
                    row["measured"] = {p: relative_error(g_w[p], ref[p]) for p in layers}
                    row["measured_all_readers"] = {p: relative_error(g_a[p], ref[p]) for p in layers}
                    row["measured_mask_kept"] = {p: relative_error(g_m[p], ref[p]) for p in layers}
                rows.append(row)
        return {"model": model_spec, "batch": batch, "rows": rows, "per_bound": result_layers,
                "statistics_mismatch": mismatch,
                "trace_tensors": len(trace["tensors"])}
    finally:
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)


def markdown(result):
    lines = [f"{result['model']}, batch {result['batch']}: szp, relative bound eb (absolute bound as the CLI gave it); "
             f"relative weight-gradient error ||G' - G|| / ||G||",
             "",
             "| bound | layer (most sensitive consumer) | predicted | measured, weight path | measured / predicted "
             "| measured, all readers | measured, all readers, mask kept | mask kept / predicted "
             "| other consumers (measured) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if r["absolute_error_bound"] is None:
            lines.append(f"| {r['bound']:g} | {r['tensor']} | {r['predicted']} | not measured (no absolute bound "
                         f"or no conv/linear module) | | | | | |")
            continue
        first = r["layers"][0]
        pred, meas = r["predicted"], r["measured"][first]
        ratio = f"{meas / pred:.3f}" if pred else "n/a"
        kept = r["measured_mask_kept"][first]
        kept_ratio = f"{kept / pred:.3f}" if pred else "n/a"
        others = ", ".join(f"{p} {r['measured'][p]:.3g}" for p in r["layers"][1:])
        flag = " [r]" if r["relu_mask"] else ""
        pred_text = f"{pred:.4g}" if pred is not None else "none"
        lines.append(f"| {r['bound']:g} | {first}{flag} | {pred_text} | {meas:.4g} | {ratio} | "
                     f"{r['measured_all_readers'][first]:.4g} | {kept:.4g} | {kept_ratio} | {others} |")
    lines += ["", "Every conv/linear layer's relative weight-gradient error (input compressed: its input is one of "
              "the storages above):", "",
              "| bound | tensors packed: weight path / all readers / mask kept | layer | input compressed | weight path "
              "| all readers | all readers, mask kept |", "|---|---|---|---|---|---|---|"]
    for b in result["per_bound"]:
        for path, e in b["layers"].items():
            lines.append(f"| {b['bound']:g} | {b['packed_weight_path']} / {b['packed_all_readers']} / "
                         f"{b['packed_mask_kept']} | {path} | {'yes' if e['input_compressed'] else 'no'} | "
                         f"{e['weight_path']:.4g} | {e['all_readers']:.4g} | {e['mask_kept']:.4g} |")
    lines += ["", "Streams of all readers: " + "; ".join(
        f"{b['bound']:g}: {b['compressed_bytes_all_readers']} B, mask kept {b['compressed_bytes_mask_kept']} B"
        for b in result["per_bound"])]
    return "\n".join(lines)


def summary(result):
    """Per bound and run ('measured': weight path, 'measured_mask_kept': all readers with the
    positive mask): the geometric mean of measured / predicted, its min and max, over the rows."""
    out = {}
    for r in result["rows"]:
        if r["absolute_error_bound"] is None or not r["predicted"]:
            continue
        for run in ("measured", "measured_mask_kept"):
            out.setdefault((r["bound"], run), []).append(r[run][r["layers"][0]] / r["predicted"])
    return {k: {"rows": len(v), "geomean": math.exp(sum(math.log(x) for x in v) / len(v)),
                "min": min(v), "max": max(v)} for k, v in out.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description="Measured weight-gradient error of compressed activations vs "
                                            "comptrain's predicted sigma, per layer (issue 16, item 5a).")
    p.add_argument("model", help="torchvision model name (resnet18), module:factory, or small_cnn / small_transformer")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--bounds", default="1e-3,1e-2", help="relative szp bounds, comma-separated")
    p.add_argument("--input-shape", help="per-sample input shape (default 3,224,224; 3,16,16 for small_cnn; "
                                          "16,16 for small_transformer)")
    p.add_argument("--num-classes", type=int, help="label range (default 1000; 10 for the small models)")
    p.add_argument("--platform", default="a100-40gb", help="the scenario's platform (its profile gives the ratios; "
                                                           "irrelevant to the prediction)")
    p.add_argument("--comptrain", default=os.environ.get("COMPTRAIN_CLI") or shutil.which("comptrain"),
                   help="the comptrain CLI (default $COMPTRAIN_CLI, else comptrain on PATH)")
    p.add_argument("--capture", default=os.environ.get("COMPTRAIN_CAPTURE", "traces/capture/comptrain_capture.py"),
                   help="comptrain_capture.py (default $COMPTRAIN_CAPTURE, else traces/capture/ under the current directory)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    small = {"small_cnn": ("3,16,16", 10), "small_transformer": ("16,16", 10)}
    spec, shape, classes = args.model, "3,224,224", 1000
    if args.model in small:
        spec = f"comptrain_codecs.gradient_error_check:{args.model}"
        shape, classes = small[args.model]
    shape = args.input_shape or shape
    classes = args.num_classes or classes
    try:
        bounds = [float(b) for b in args.bounds.split(",")]
    except ValueError:
        print(f"gradient_error_check: --bounds: found {args.bounds!r}; expected comma-separated numbers", file=sys.stderr)
        return 2
    if not args.comptrain or not os.path.isfile(args.comptrain):
        print(f"gradient_error_check: --comptrain: the comptrain CLI not found ({args.comptrain!r}); "
              f"give its path or set COMPTRAIN_CLI", file=sys.stderr)
        return 2
    try:
        result = run_check(spec, args.batch, bounds, args.comptrain, args.capture, shape, classes,
                           args.platform, args.seed, args.threads)
    except CheckError as e:
        print(f"gradient_error_check: {e}", file=sys.stderr)
        return 2
    result["model"] = args.model
    print(markdown(result))
    print()
    for (b, run), s in summary(result).items():
        what = "weight path" if run == "measured" else "all readers, mask kept"
        print(f"bound {b:g}, {what}: measured / predicted over {s['rows']} layers: geometric mean {s['geomean']:.3f}, "
              f"min {s['min']:.3f}, max {s['max']:.3f}")
    if result["statistics_mismatch"]:
        print("warning: the reference step's RMS(G) differs from the capture's: " + "; ".join(result["statistics_mismatch"]),
              file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
