#!/usr/bin/env python3
"""Refit Polaris's three checkpoint costs on DataStates-LLM's runs (issue 34, item 4).

polaris.yaml's storage.shared.checkpoint_overhead, host_link.checkpoint_copy_bandwidth and
host.torch_save_bandwidth were fitted together: a grid over the three values, each combination's
median |error| over the fit points (by default Figures 9 and 10's 18 bars,
`datastates-llm-*-dp*-ckpt-throughput`) computed by `comptrain validate` on a copy of the
platform file with those values, the smallest median kept. This script repeats that fit from the
shipped table and platform file, and prints every combination with its median over the fit
points and over the other checkpoint-throughput points (held out of this fit).
scenarios/validation/README.md, "The fitted checkpoint costs", gives the result.

    scripts/fit-checkpoint-costs.py [--comptrain build/cli/comptrain] [--overhead-ms 80,100,...]
        [--copy-gbs 9,10,...] [--save-gbs 1.0,1.1,...] [--fit PATTERN]

It writes nothing in the tree (its files go to a temporary directory) and changes no value: a
new fit is copied into polaris.yaml by hand, with the README's table. The default grid (125
combinations) takes some minutes on two cores.
"""

import argparse
import fnmatch
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLATFORM = ROOT / "scenarios" / "platforms" / "polaris.yaml"
TABLE = ROOT / "scenarios" / "validation" / "published.jsonl"
# The three values as polaris.yaml writes them; each pattern must match exactly once.
KEYS = {
    "overhead": (r"(\n    checkpoint_overhead: )[0-9.]+ ms", "{} ms"),
    "copy": (r"(\n  checkpoint_copy_bandwidth: )[0-9.]+ GB/s", "{} GB/s"),
    "save": (r"(\n  torch_save_bandwidth: )[0-9.]+ GB/s", "{} GB/s"),
}


def numbers(text):
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': expected comma-separated numbers")
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}': expected positive numbers")
    return values


def platform_with(text, overhead, copy, save):
    for key, value in (("overhead", overhead), ("copy", copy), ("save", save)):
        pattern, unit = KEYS[key]
        text, count = re.subn(pattern, lambda m: m.group(1) + unit.format(f"{value:g}"), text)
        if count != 1:
            sys.exit(f"fit-checkpoint-costs: {PLATFORM}: found {count} lines for {key}; expected one")
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comptrain", default=str(ROOT / "build" / "cli" / "comptrain"))
    parser.add_argument("--overhead-ms", type=numbers, default=[80, 100, 120, 140, 160])
    parser.add_argument("--copy-gbs", type=numbers, default=[9, 10, 11, 12, 13])
    parser.add_argument("--save-gbs", type=numbers, default=[1.0, 1.1, 1.2, 1.3, 1.4])
    parser.add_argument("--fit", default="datastates-llm-*-dp*-ckpt-throughput", help="the fit points' ids (a shell pattern)")
    args = parser.parse_args()

    points = []
    for line in TABLE.read_text().splitlines():
        if line.startswith("{"):
            point = json.loads(line)
            if point["id"].startswith("datastates-llm-") and point["metric"] == "checkpoint_throughput":
                points.append(point)
    fit_ids = {p["id"] for p in points if fnmatch.fnmatchcase(p["id"], args.fit)}
    if not fit_ids:
        sys.exit(f"fit-checkpoint-costs: no checkpoint_throughput point matches '{args.fit}'")
    base = PLATFORM.read_text()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        platform_file = pathlib.Path(work) / "polaris-fit.yaml"
        table_file = pathlib.Path(work) / "checkpoints.jsonl"
        table_file.write_text("".join(json.dumps({**p, "platform": str(platform_file)}) + "\n" for p in points))
        for overhead in args.overhead_ms:
            for copy in args.copy_gbs:
                for save in args.save_gbs:
                    platform_file.write_text(platform_with(base, overhead, copy, save))
                    run = subprocess.run([args.comptrain, "validate", str(table_file), "--json"], capture_output=True, text=True)
                    if run.returncode != 0:
                        sys.exit(f"fit-checkpoint-costs: comptrain validate exited {run.returncode}:\n{run.stderr}")
                    errors = {p["id"]: abs(p["error"]) for p in json.loads(run.stdout)["points"] if p["error"] is not None}
                    fit = statistics.median(e for i, e in errors.items() if i in fit_ids)
                    held = [e for i, e in errors.items() if i not in fit_ids]
                    rows.append((fit, statistics.median(held) if held else float("nan"), overhead, copy, save))
                    print(f"overhead {overhead:g} ms, copy {copy:g} GB/s, torch.save {save:g} GB/s: "
                          f"fit median {100 * fit:.1f}% ({len(fit_ids)}), held out {100 * rows[-1][1]:.1f}% ({len(held)})", flush=True)
    best = min(rows)
    print(f"best: overhead {best[2]:g} ms, copy {best[3]:g} GB/s, torch.save {best[4]:g} GB/s: "
          f"fit median {100 * best[0]:.1f}%, held out {100 * best[1]:.1f}%")


if __name__ == "__main__":
    main()
