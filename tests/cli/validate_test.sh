#!/usr/bin/env bash
# `comptrain validate`: the fast subset of the validation table runs, exits 0 and prints the
# summary per metric; --points selects by id; a malformed table exits 2 naming the file and the line.
# Usage: validate_test.sh PATH/TO/comptrain PATH/TO/scenarios/validation
set -u
source "$(dirname "$0")/check_lib.sh" "$@"
dir=$src

# expect CODE REGEX -- ARGS...: exit status CODE and REGEX in stdout + stderr.
expect() {
  local code=$1 pattern=$2
  shift 3
  local out status
  out=$("$bin" "$@" 2>&1)
  status=$?
  [[ $status -eq $code ]] || fail "comptrain $* exited $status, expected $code; output: $(tail -5 <<<"$out")"
  grep -Eq -- "$pattern" <<<"$out" || fail "comptrain $* printed no match for '$pattern'; output: $(tail -5 <<<"$out")"
}

expect 0 'Summary per metric' -- validate "$dir/published.jsonl" --fast -j 2
expect 0 'peak_mem_bytes +1 ' -- validate "$dir/published.jsonl" --fast -j 2
expect 0 '"schema"' -- validate "$dir/published.jsonl" --fast --json -j 2
"$bin" validate "$dir/published.jsonl" --fast -j 2 -o "$work/out.txt" >/dev/null 2>&1 || fail "validate -o exited non-zero"
grep -q 'median |error|' "$work/out.txt" || fail "validate -o wrote no summary"
# --points: the p5 network's fit set alone (collectives: no scenario to simulate), and a pattern
# that matches nothing exits 2 naming the table.
expect 0 'bus_bandwidth +7 ' -- validate "$dir/published.jsonl" --points 'nccl-p5-4x8-allgather-*' -j 2
expect 2 "published.jsonl: no point's id matches \"nope-\*\"" -- validate "$dir/published.jsonl" --points 'nope-*'

# Malformed tables: the file and the line of the fault.
printf '# a comment\n{"id": "x", "metric": \n' >"$work/bad.jsonl"
expect 2 "comptrain: error: .*bad.jsonl:2:.*malformed JSON" -- validate "$work/bad.jsonl"
head -3 "$dir/published.jsonl" >"$work/unknown.jsonl"
sed -n '4p' "$dir/published.jsonl" | sed 's/^{/{"colour": "red", /' >>"$work/unknown.jsonl"
expect 2 "unknown.jsonl:4: unknown field 'colour'" -- validate "$work/unknown.jsonl"
head -3 "$dir/published.jsonl" >"$work/noscenario.jsonl"
sed -n '4p' "$dir/published.jsonl" >>"$work/noscenario.jsonl"  # its scenario is not beside this copy
expect 2 "noscenario.jsonl:4: field 'scenario': .* is not a file" -- validate "$work/noscenario.jsonl"
expect 2 "cannot read '.*missing\.jsonl': No such file or directory" -- validate "$work/missing.jsonl"
expect 2 "cannot read '.*': it is a directory; expected a regular file" -- validate "$work"

finish validate_test
