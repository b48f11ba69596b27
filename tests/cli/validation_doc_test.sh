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
# shellcheck source=doc_block_lib.sh
source "$(dirname "$0")/doc_block_lib.sh"

doc_block_markers "$page" "$begin" "$end"
if ! "$bin" validate --markdown -j 2 >"$work/generated.md" 2>"$work/stderr"; then
  echo "FAIL: comptrain validate --markdown -j 2 failed:"
  tail -15 "$work/stderr"
  exit 1
fi
if [[ ! -s $work/generated.md && ${3:-} != --update ]]; then
  echo "FAIL: comptrain validate --markdown printed nothing"
  exit 1
fi
doc_block_check "$page" "$begin" "$end" "$work/generated.md" "${3:-}" \
  "docs/validation.md's table differs from 'comptrain validate --markdown -j 2'" \
  "Regenerate it after an intended change (and say in the commit why the figures moved):
  tests/cli/validation_doc_test.sh build/cli/comptrain . --update"
echo "validation_doc: the table in docs/validation.md is what validate --markdown prints ($(wc -l <"$work/generated.md") lines)"
