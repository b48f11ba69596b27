# shellcheck shell=bash
# A page's generated block: the lines strictly between a begin and an end marker line must be
# what a command prints. Shared by validation_doc_test.sh and examples_doc_test.sh.
#   doc_block_markers PAGE BEGIN END
#     exits 1 unless each marker stands once on a line of its own.
#   doc_block_check PAGE BEGIN END GENERATED MODE WHAT REGENERATE
#     MODE --update rewrites the block with the file GENERATED and exits 0; otherwise, where the
#     committed block differs from GENERATED, prints "FAIL: WHAT (- committed, + generated):", the
#     diff and the line REGENERATE (how to regenerate), and exits 1. Returns 0 when they agree.

doc_block_markers() {
  local page=$1 begin=$2 end=$3
  if [[ $(grep -cxF "$begin" "$page") -ne 1 || $(grep -cxF "$end" "$page") -ne 1 ]]; then
    echo "FAIL: $page must hold each marker once, on a line of its own: '$begin' ... '$end'"
    exit 1
  fi
}

doc_block_check() {
  local page=$1 begin=$2 end=$3 generated=$4 mode=$5 what=$6 regenerate=$7
  local scratch
  scratch=$(mktemp -d)
  if [[ $mode == --update ]]; then
    awk -v b="$begin" -v e="$end" -v gen="$generated" '
      $0 == b {print; while ((getline line < gen) > 0) print line; skip = 1; next}
      $0 == e {skip = 0}
      !skip {print}' "$page" >"$scratch/page.md" && cat "$scratch/page.md" >"$page"
    rm -rf "$scratch"
    echo "updated the generated block of $page"
    exit 0
  fi
  awk -v b="$begin" -v e="$end" '$0 == e {inside = 0} inside {print} $0 == b {inside = 1}' "$page" >"$scratch/committed.md"
  if ! diff -u "$scratch/committed.md" "$generated" >"$scratch/diff"; then
    echo "FAIL: $what (- committed, + generated):"
    cat "$scratch/diff"
    echo "$regenerate"
    rm -rf "$scratch"
    exit 1
  fi
  rm -rf "$scratch"
}
