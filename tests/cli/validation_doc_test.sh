#!/usr/bin/env bash
# The validation table of docs/validation.md is generated, not pasted: the lines between
#   <!-- validate --markdown: begin -->   and   <!-- validate --markdown: end -->
# must equal what `comptrain validate --markdown -j 2` prints for the shipped table. On a
# difference it prints the diff and how to regenerate the block.
# Usage: validation_doc_test.sh PATH/TO/comptrain PATH/TO/repository-root [--update]
#   --update rewrites the block in docs/validation.md with the command's output.
set -u
bin=$(realpath "$1")
root=$(realpath "$2")
page="$root/docs/validation.md"
begin='<!-- validate --markdown: begin -->'
end='<!-- validate --markdown: end -->'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ $(grep -cxF "$begin" "$page") -ne 1 || $(grep -cxF "$end" "$page") -ne 1 ]]; then
  echo "FAIL: $page must hold each marker once, on a line of its own: '$begin' ... '$end'"
  exit 1
fi
if ! "$bin" validate --markdown -j 2 >"$work/generated.md" 2>"$work/stderr"; then
  echo "FAIL: comptrain validate --markdown -j 2 failed:"
  tail -15 "$work/stderr"
  exit 1
fi
# The block as committed: the lines strictly between the markers.
awk -v b="$begin" -v e="$end" '$0 == e {inside = 0} inside {print} $0 == b {inside = 1}' "$page" >"$work/committed.md"

if [[ ${3:-} == --update ]]; then
  awk -v b="$begin" -v e="$end" -v gen="$work/generated.md" '
    $0 == b {print; while ((getline line < gen) > 0) print line; skip = 1; next}
    $0 == e {skip = 0}
    !skip {print}' "$page" >"$work/page.md" && cat "$work/page.md" >"$page"
  echo "updated the validation block of $page"
  exit 0
fi
if [[ ! -s $work/generated.md ]]; then
  echo "FAIL: comptrain validate --markdown printed nothing"
  exit 1
fi
if ! diff -u "$work/committed.md" "$work/generated.md" >"$work/diff"; then
  echo "FAIL: docs/validation.md's table differs from 'comptrain validate --markdown -j 2' (- committed, + generated):"
  cat "$work/diff"
  echo "Regenerate it after an intended change (and say in the commit why the figures moved):"
  echo "  tests/cli/validation_doc_test.sh build/cli/comptrain . --update"
  exit 1
fi
echo "validation_doc: the table in docs/validation.md is what validate --markdown prints ($(wc -l <"$work/generated.md") lines)"
