#!/usr/bin/env bash
# The example scenarios' figures in scenarios/README.md are generated, not pasted: the lines
# between
#   <!-- examples: begin -->   and   <!-- examples: end -->
# must equal the table this script makes from `comptrain simulate FILE --json` of every example in
# the README's first table (its `| \`FILE.yaml\` |` rows; the layout plans, whose question is
# `plan`'s, are left to their own rows) and of every file of its literature scenarios' table (its
# `| \`NAME-{a,b}.yaml\` |` rows, the braces expanded). On a difference it prints the diff and how
# to regenerate.
# Usage: examples_doc_test.sh PATH/TO/comptrain PATH/TO/repository-root [--update]
#   --update rewrites the block in scenarios/README.md with the generated table.
set -u
bin=$(realpath "$1")
root=$(realpath "$2")
page="$root/scenarios/README.md"
begin='<!-- examples: begin -->'
end='<!-- examples: end -->'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ $(grep -cxF "$begin" "$page") -ne 1 || $(grep -cxF "$end" "$page") -ne 1 ]]; then
  echo "FAIL: $page must hold each marker once, on a line of its own: '$begin' ... '$end'"
  exit 1
fi
# The examples: the first table's file column, in its order, the layout plans left out; then the
# literature scenarios' file column, each {a,b,...} expanded in order.
awk '/^\| file \| what it asks \|$/ {inside = 1; next} inside && !/^\|/ {exit} inside' "$page" |
  sed -n 's/^| `\([a-z0-9.-]*\.yaml\)` |.*/\1/p' | grep -v -- '-plan' >"$work/examples"
awk '/^\| file\(s\) \| what it asks \|$/ {inside = 1; next} inside && !/^\|/ {exit} inside' "$page" |
  sed -n 's/^| `\([a-z0-9.,{}-]*\.yaml\)` |.*/\1/p' |
  /usr/bin/python3 -c '
import itertools, re, sys
for pattern in sys.stdin.read().split():
    parts = re.split(r"\{([^}]*)\}", pattern)  # literal, choices, literal, choices, ...
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    for pick in itertools.product(*choices):
        print("".join(pick))' >>"$work/examples"
if [[ ! -s $work/examples ]]; then
  echo "FAIL: no example found in the first table of $page"
  exit 1
fi
{
  echo '| scenario | variant | fits | iteration time | samples/s | reserved peak |'
  echo '|---|---|---|--:|--:|--:|'
} >"$work/generated.md"
while read -r example; do
  if ! "$bin" simulate "$root/scenarios/$example" --json >"$work/run.json" 2>"$work/stderr"; then
    echo "FAIL: comptrain simulate scenarios/$example --json failed:"
    tail -15 "$work/stderr"
    exit 1
  fi
  # One row per run (a sweep's variants in order); a pipeline's reserved peak per stage.
  if ! /usr/bin/python3 - "$example" "$work/run.json" >>"$work/generated.md" <<'EOF'; then
import json, sys

example, path = sys.argv[1], sys.argv[2]
with open(path) as f:
    document = json.load(f)

def gib(n):
    return f"{n / 2**30:.2f} GiB"

def seconds(s):
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"

def row(label, run):
    if not run["fits"] and run.get("results") is None and "stages" not in run:
        # Out of memory: the reserved memory when the allocation failed.
        reserved = gib(run["out_of_memory"]["reserved_bytes"]) + " at the failure"
        print(f"| `{example}` | {label} | no | - | - | {reserved} |")
        return
    if "stages" in run:  # a pipeline: the layout's replay, each stage's reserved peak
        reserved = " / ".join(gib(stage["max_memory_reserved_bytes"]) for stage in run["stages"])
        time, rate = run["iteration_seconds"], run["samples_per_second"]
    else:
        results = run["results"]
        reserved = gib(results["memory"]["max_memory_reserved_bytes"])
        time, rate = results["iteration_seconds"], results["samples_per_second"]
    fits = "yes" if run["fits"] else "no"
    print(f"| `{example}` | {label} | {fits} | {seconds(time)} | {rate:.2f} | {reserved} |")

if "variants" in document:
    for variant in document["variants"]:
        row(f"`{variant['label']}`", variant["result"])
else:
    row("", document)
EOF
    echo "FAIL: the JSON of scenarios/$example lacks a field the table reads"
    exit 1
  fi
done <"$work/examples"

awk -v b="$begin" -v e="$end" '$0 == e {inside = 0} inside {print} $0 == b {inside = 1}' "$page" >"$work/committed.md"
if [[ ${3:-} == --update ]]; then
  awk -v b="$begin" -v e="$end" -v gen="$work/generated.md" '
    $0 == b {print; while ((getline line < gen) > 0) print line; skip = 1; next}
    $0 == e {skip = 0}
    !skip {print}' "$page" >"$work/page.md" && cat "$work/page.md" >"$page"
  echo "updated the examples block of $page"
  exit 0
fi
if ! diff -u "$work/committed.md" "$work/generated.md" >"$work/diff"; then
  echo "FAIL: scenarios/README.md's example figures differ from what comptrain simulate gives (- committed, + generated):"
  cat "$work/diff"
  echo "Regenerate them after an intended change (and update the rows' prose that quotes them):"
  echo "  tests/cli/examples_doc_test.sh build/cli/comptrain . --update"
  exit 1
fi
echo "examples_doc: the example figures in scenarios/README.md are what simulate gives ($(($(wc -l <"$work/generated.md") - 2)) runs)"
