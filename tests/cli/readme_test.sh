#!/usr/bin/env bash
# Runs every command of README.md's ```sh blocks that starts with `comptrain` or
# `/usr/bin/python3 traces/...`, as written, from a scratch directory that sees the repository's
# scenarios/, tests/, traces/ and calibrate/ (so the files it writes stay out of the tree). Each must exit 0.
# The set-up commands (bash scripts/...) and `export PATH` are not run: the test puts the built
# comptrain on PATH itself.
# Usage: readme_test.sh PATH/TO/comptrain PATH/TO/repository-root
set -u
bin=$(realpath "$1")
root=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for d in scenarios tests traces calibrate; do ln -s "$root/$d" "$work/$d"; done
export PATH="$(dirname "$bin"):$PATH"
cd "$work" || exit 1

commands=$(awk '/^```sh$/ {in_block = 1; next} /^```/ {in_block = 0} in_block' "$root/README.md" |
  grep -E '^(comptrain |/usr/bin/python3 traces/)')
passed=0
failed=0
skipped=0
have_torch=1
/usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
while IFS= read -r line; do
  if [[ $line == /usr/bin/python3* && $have_torch -eq 0 ]]; then
    skipped=$((skipped + 1))
    continue
  fi
  # The comment after the command is prose; bash ignores it anyway.
  if out=$(timeout 300 bash -c "$line" 2>&1 </dev/null); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL (exit $?): $line"
    sed 's/^/    /' <<<"$out" | tail -15
  fi
done <<<"$commands"
echo "readme: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 && $passed -gt 20 ]]
