"""The table of the example scenarios' figures that scenarios/README.md holds between its
<!-- examples: begin --> and <!-- examples: end --> markers (tests/cli/examples_doc_test.sh).

Usage: examples_table.py PATH/TO/comptrain PATH/TO/scenarios/README.md

The examples: the file column of the README's first table ("| file | what it asks |"), in order,
the layout plans (whose question is `plan`'s) left out; then the file column of its literature
scenarios' table ("| file(s) | what it asks |"), each {a,b,...} expanded in order. Each is run
as `comptrain simulate FILE --json`: one row per run (a sweep's variants in order), a pipeline's
reserved peak per stage, a run that does not fit with the memory reserved at its failure.
Prints the table; exits 1 with a message when a table is missing or a run fails.
"""

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path


def files_of_table(lines, header):
    """The `NAME.yaml` of each row of the table whose header line is `header`."""
    try:
        start = lines.index(header)
    except ValueError:
        sys.exit(f"FAIL: no table '{header}' in the page")
    files = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        match = re.match(r"\| `([a-z0-9.,{}-]+\.yaml)` \|", line)
        if match:
            files.append(match.group(1))
    return files


def expand(pattern):
    """`comet-{a,b}-{x,y}.yaml` -> comet-a-x.yaml, comet-a-y.yaml, comet-b-x.yaml, ..."""
    parts = re.split(r"\{([^}]*)\}", pattern)  # literal, choices, literal, choices, ...
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(pick) for pick in itertools.product(*choices)]


def gib(n):
    return f"{n / 2**30:.2f} GiB"


def seconds(s):
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"


def row(example, label, run):
    if "stages" in run:  # a pipeline: the layout's replay, each stage's reserved peak
        reserved = " / ".join(gib(stage["max_memory_reserved_bytes"]) for stage in run["stages"])
        time, rate = run["iteration_seconds"], run["samples_per_second"]
    elif run.get("results") is None:  # out of memory: the reserved memory at the failure
        return f"| `{example}` | {label} | no | - | - | {gib(run['out_of_memory']['reserved_bytes'])} at the failure |"
    else:
        results = run["results"]
        reserved = gib(results["memory"]["max_memory_reserved_bytes"])
        time, rate = results["iteration_seconds"], results["samples_per_second"]
    fits = "yes" if run["fits"] else "no"
    return f"| `{example}` | {label} | {fits} | {seconds(time)} | {rate:.2f} | {reserved} |"


def main():
    binary, page = sys.argv[1], Path(sys.argv[2])
    lines = page.read_text().splitlines()
    examples = [f for f in files_of_table(lines, "| file | what it asks |") if "-plan" not in f]
    for pattern in files_of_table(lines, "| file(s) | what it asks |"):
        examples += expand(pattern)
    print("| scenario | variant | fits | iteration time | samples/s | reserved peak |")
    print("|---|---|---|--:|--:|--:|")
    for example in examples:
        run = subprocess.run([binary, "simulate", str(page.parent / example), "--json"], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"FAIL: comptrain simulate scenarios/{example} --json exited {run.returncode}:\n{run.stderr[-2000:]}")
        document = json.loads(run.stdout)
        try:
            if "variants" in document:
                for variant in document["variants"]:
                    print(row(example, f"`{variant['label']}`", variant["result"]))
            else:
                print(row(example, "", document))
        except KeyError as missing:
            sys.exit(f"FAIL: the JSON of scenarios/{example} lacks {missing}, which the table reads")


if __name__ == "__main__":
    main()
