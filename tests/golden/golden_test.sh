#!/usr/bin/env bash
# Golden outputs: runs each case of cases.txt and compares its normalised standard output with
# expected/NAME.out. A refactor keeps every file identical; an intended change regenerates them
# (--update) and its commit says why each one moved.
# Normalised: figures measured on the machine rather than computed (the hybrid plan's MILP and
# greedy CPU seconds, in its JSON and in its table's "status (gap, seconds)"), replaced by "<time>"; the repository's path (validate's default table) by
# "<repository>".
# Usage: golden_test.sh PATH/TO/comptrain PATH/TO/repository-root [--update] [NAME...]
set -u
bin=$(realpath "$1")
root=$(realpath "$2")
shift 2
update=0
if [[ ${1:-} == --update ]]; then update=1; shift; fi
only=("$@")
here="$root/tests/golden"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PATH="$(dirname "$bin"):$PATH"

normalise() {
  sed -E \
    -e 's/("(milp|greedy)_cpu_seconds": )[-0-9.eE+]+/\1<time>/g' \
    -e 's/[0-9]+(\.[0-9]+)? (s|ms) of CPU per solve/<time> of CPU per solve/g' \
    -e 's/ ([a-z_]+) \(([-0-9.]+%), [0-9.]+\)/ \1 (\2, <time>)/g' \
    -e "s|$root|<repository>|g"
}

passed=0
failed=0
while IFS= read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  name=$(sed -E 's/^([^ |]+).*/\1/' <<<"$line")
  cmd=$(sed -E 's/^[^|]*\| //' <<<"$line")
  if ((${#only[@]})) && ! printf '%s\n' "${only[@]}" | grep -qx -- "$name"; then continue; fi
  dir="$work/$name"
  mkdir -p "$dir"
  for d in scenarios tests traces calibrate; do ln -s "$root/$d" "$dir/$d"; done
  start=$SECONDS
  out=$(cd "$dir" && timeout 600 bash -o pipefail -c "$cmd" 2>"$dir/.stderr" </dev/null)
  status=$?
  took=$((SECONDS - start))
  actual=$(printf '%s\nexit %d\n' "$out" "$status" | normalise)
  expected_file="$here/expected/$name.out"
  if ((update)); then
    printf '%s\n' "$actual" >"$expected_file"
    echo "wrote $name (exit $status, ${took} s)"
    continue
  fi
  if [[ ! -f $expected_file ]]; then
    echo "FAIL $name: no expected/$name.out (run with --update)"
    failed=$((failed + 1))
  elif diff -u --label "expected/$name.out" --label "actual" "$expected_file" <(printf '%s\n' "$actual") >"$dir/.diff"; then
    passed=$((passed + 1))
    echo "ok $name (${took} s)"
  else
    echo "FAIL $name: $cmd"
    head -40 "$dir/.diff" | sed 's/^/    /'
    [[ -s $dir/.stderr ]] && tail -5 "$dir/.stderr" | sed 's/^/    stderr: /'
    failed=$((failed + 1))
  fi
done <"$here/cases.txt"
((update)) && exit 0
echo "golden: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
