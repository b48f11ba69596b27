# shellcheck shell=bash
# What the CLI checks that take PATH/TO/comptrain PATH/TO/source-tree share: `bin` and `src`, a
# scratch folder `work` removed on exit, `fail MESSAGE` (counts and prints a failure) and
# `finish NAME` (prints "NAME: all passed" when nothing failed; exits 1 otherwise).
# Sourced after `set -u` with the script's own arguments.
bin=$(realpath "$1")
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
finish() {
  [[ $failures -eq 0 ]] && echo "$1: all passed"
  exit $((failures > 0))
}
