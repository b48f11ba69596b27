#!/usr/bin/env bash
# The man page generated at build time from the help texts (cli/CMakeLists.txt, help2man): it
# exists, is not older than the executable it describes, carries its version, and has a
# section for every command and subcommand that `comptrain help` lists, with its options.
# Usage: man_page_test.sh PATH/TO/comptrain.1 PATH/TO/comptrain
set -u
page=$1
bin=$2
failed=0
fail() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}

[[ -s "$page" ]] || { echo "FAIL: $page was not generated"; exit 1; }
[[ "$page" -ot "$bin" ]] && fail "$page is older than $bin (not regenerated)"
version=$("$bin" --version)
grep -q "^\.TH COMPTRAIN \"1\" .*\"${version}\"" "$page" || fail "no .TH line with '$version'"

# Commands, read from the executable's own help (two levels: trace has subcommands).
subcommands() { "$bin" help "$@" | sed -n '/^Subcommands:$/,/^$/p' | grep -Eo '^  [a-z][a-z0-9-]*' | tr -d ' '; }
count=0
for cmd in $(subcommands); do
  for words in "$cmd" $(subcommands "$cmd" | sed "s/^/$cmd:/"); do
    name=${words//:/ }
    count=$((count + 1))
    grep -qF ".SS \"comptrain $name\"" "$page" || fail "no section for 'comptrain $name'"
  done
done
((count >= 10)) || fail "only $count commands found in the help: the help's layout changed?"
# Option names as roff writes them (\- for a minus), from a subcommand's section.
grep -qF '\-\-max\-batch' "$page" || fail "plan's --max-batch is missing"
grep -qF '\-\-emit\-platform' "$page" || fail "calibrate's --emit-platform is missing"
# A command's details, which `comptrain --help` leaves to the command's own help (its summary
# only), are in the page: plan's paragraph, and merge's (wrapped: the lines are joined first).
joined=$(tr '\n' ' ' <"$page")
grep -qF 'scaling efficiency is against its best' <<<"$joined" || fail "plan's details are missing"
grep -qF 'cover every variant exactly once' <<<"$joined" || fail "merge's details are missing"

echo "man page: $count command sections checked, $failed failed"
[[ $failed -eq 0 ]]
