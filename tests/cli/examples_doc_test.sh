#!/usr/bin/env bash
# The example scenarios' figures in scenarios/README.md are generated, not pasted: the lines
# between
#   <!-- examples: begin -->   and   <!-- examples: end -->
# must equal what examples_table.py makes from `comptrain simulate FILE --json` of every example in
# the README's first table (the layout plans left out) and of every file of its literature
# scenarios' table (examples_table.py says which and how). On a difference it prints the diff and
# how to regenerate.
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
# shellcheck source=doc_block_lib.sh
source "$(dirname "$0")/doc_block_lib.sh"

doc_block_markers "$page" "$begin" "$end"
if ! /usr/bin/python3 "$(dirname "$0")/examples_table.py" "$bin" "$page" >"$work/generated.md"; then
  exit 1
fi
doc_block_check "$page" "$begin" "$end" "$work/generated.md" "${3:-}" \
  "scenarios/README.md's example figures differ from what comptrain simulate gives" \
  "Regenerate them after an intended change (and update the rows' prose that quotes them):
  tests/cli/examples_doc_test.sh build/cli/comptrain . --update"
echo "examples_doc: the example figures in scenarios/README.md are what simulate gives ($(($(wc -l <"$work/generated.md") - 2)) runs)"
