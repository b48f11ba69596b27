#!/usr/bin/env bash
# Runs every command of the documentation's ```sh blocks that starts with `comptrain` or
# `/usr/bin/python3 traces/...`, as written, from a scratch directory that sees the repository's
# scenarios/, tests/, traces/ and calibrate/ (so the files it writes stay out of the tree). Each
# must exit 0. The pages read: README.md, every docs/*.md, and the folder READMEs that hold
# ```sh blocks of such commands: hybrid/README.md. Other folder READMEs show their commands in
# plain ``` blocks, which are not run.
# The set-up commands (bash scripts/...) and `export PATH` are not run: the test puts the built
# comptrain on PATH itself. A command too slow to run here is shown in a ```console block
# instead, with the reason beside it.
# A command written exactly as a golden case's command (tests/golden/cases.txt) is not run here:
# ctest's golden.NAME runs it and compares its whole output, so it counts as covered.
# Every page with a ```sh block must have at least one command that ran and passed (or is
# covered by a golden case), so a page whose blocks all stop matching (a renamed fence, a changed
# prompt) fails rather than passes with nothing run.
# Usage: docs_test.sh PATH/TO/comptrain PATH/TO/repository-root
set -u
bin=$(realpath "$1")
root=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for d in scenarios tests traces calibrate; do ln -s "$root/$d" "$work/$d"; done
export PATH="$(dirname "$bin"):$PATH"

pages=("$root/README.md" "$root"/docs/*.md "$root/hybrid/README.md")
have_torch=1
/usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
total_passed=0
failed=0
skipped=0
pages_without=()
declare -A ran
# The golden cases' commands: NAME | COMMAND per line.
declare -A golden
while IFS= read -r case_line; do
  [[ $case_line =~ ^([a-z0-9-]+)[[:space:]]*\|[[:space:]](.*)$ ]] || continue
  golden[${BASH_REMATCH[2]}]=${BASH_REMATCH[1]}
done <"$root/tests/golden/cases.txt"
covered=0
for page in "${pages[@]}"; do
  [[ -f $page ]] || { echo "FAIL: missing page $page"; failed=$((failed + 1)); continue; }
  name=${page#"$root"/}
  grep -q '^```sh$' "$page" || continue
  commands=$(awk '/^```sh$/ {in_block = 1; next} /^```/ {in_block = 0} in_block' "$page" |
    grep -E '^(comptrain |/usr/bin/python3 traces/)')
  passed=0
  page_skipped=0
  page_covered=0
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    if [[ $line == /usr/bin/python3* && $have_torch -eq 0 ]]; then
      page_skipped=$((page_skipped + 1))
      continue
    fi
    # Every command runs in the one scratch directory, in page order: a command may read what an
    # earlier one on its page wrote (an exported trace, sweep shards). The comment after the command is prose; bash ignores it anyway.
    # A command repeated on another page (the README's first session) runs once and counts
    # for both pages; the comment after it does not make it another command.
    key=$(sed -E 's/[[:space:]]+#[[:space:]].*$//' <<<"$line")
    if [[ -n ${golden[$key]+x} ]]; then
      page_covered=$((page_covered + 1))
      continue
    fi
    if [[ -n ${ran[$key]+x} ]]; then
      if [[ ${ran[$key]} == ok ]]; then passed=$((passed + 1)); fi
      continue
    fi
    start=$SECONDS
    if out=$(cd "$work" && timeout 300 bash -c "$line" 2>&1 </dev/null); then
      passed=$((passed + 1))
      ran[$key]=ok
    else
      rc=$?
      failed=$((failed + 1))
      ran[$key]=failed
      echo "FAIL ($name, exit $rc): $line"
      sed 's/^/    /' <<<"$out" | tail -15
    fi
    if ((SECONDS - start >= 10)); then echo "slow ($((SECONDS - start)) s, $name): $line"; fi
  done <<<"$commands"
  echo "$name: $passed passed, $page_covered covered by golden cases, $page_skipped skipped"
  total_passed=$((total_passed + passed))
  covered=$((covered + page_covered))
  skipped=$((skipped + page_skipped))
  # Skips (no torch) do not count: a page must run something here.
  if ((passed == 0 && page_covered == 0 && page_skipped == 0)); then pages_without+=("$name"); fi
done
for name in "${pages_without[@]}"; do echo "FAIL: $name has \`\`\`sh blocks but no comptrain or /usr/bin/python3 traces/ command in them"; done
echo "docs: $total_passed passed, $covered covered by golden cases, $failed failed, $skipped skipped over ${#pages[@]} pages"
[[ $failed -eq 0 && ${#pages_without[@]} -eq 0 && $total_passed -gt 0 ]]
