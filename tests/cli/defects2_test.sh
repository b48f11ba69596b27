#!/usr/bin/env bash
# Regression test for the second round of adversarial inputs (shared/defects-2/): every case of
# tests/data/defects-2/ must end with exit 2 and a located message, or run correctly, under
# `timeout 60` and an 8 GiB address-space limit. Never a crash, a hang, an internal error, a
# damaged file, or a result built on a non-finite number.
#
# Each folder of tests/data/defects-2/ holds the defect's inputs and a `case.sh`, sourced here
# from inside the folder, which calls:
#   expect CODE PATTERN -- ARGS...      comptrain ARGS must exit CODE, its stdout + stderr must
#                                       match the extended regular expression PATTERN
#   expect_python CODE PATTERN -- FILE  the same for `python3 FILE` with comptrain_codecs on
#                                       PYTHONPATH (skipped when the module was not built)
#   check WHAT COMMAND...               any other condition (a file left intact, a FIFO read)
# `$work` is a fresh scratch folder per case (outputs, FIFOs, generated inputs), `$bin` the binary.
# Usage: defects2_test.sh PATH/TO/comptrain PATH/TO/tests/data/defects-2 [PYTHONPATH-of-comptrain_codecs]
set -u
bin=$(realpath "$1")
data=$(realpath "$2")
python_path=${3:+$(realpath "$3")}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
passed=0
failed=0
# The limits every command runs under: the issue's "timeout 60 and an 8 GiB address-space limit".
readonly kSeconds=60
readonly kAddressSpaceKiB=8388608

report() {  # report OK DESCRIPTION OUTPUT
  if [[ $1 == ok ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: ($case_name) $2"
    sed 's/^/    /' <<<"$3" | head -20
  fi
}

expect() {
  local code=$1 pattern=$2
  shift 3
  local out actual
  out=$(ulimit -v $kAddressSpaceKiB; timeout $kSeconds "$bin" "$@" 2>&1)
  actual=$?
  if [[ $actual -eq $code ]] && grep -Eq -- "$pattern" <<<"$out" && ! grep -q 'internal error' <<<"$out"; then
    report ok "" ""
  else
    report fail "comptrain $* -> exit $actual (expected $code), output should match /$pattern/:" "$out"
  fi
}

expect_python() {
  local code=$1 pattern=$2 file=$4
  if [[ -z $python_path ]]; then return; fi
  local out actual
  out=$(ulimit -v $kAddressSpaceKiB; PYTHONPATH=$python_path timeout $kSeconds /usr/bin/python3 "$file" 2>&1)
  actual=$?
  if [[ $actual -eq 77 ]]; then return; fi  # the script's own "skipped" (no NumPy)
  if [[ $actual -eq $code ]] && grep -Eq -- "$pattern" <<<"$out"; then
    report ok "" ""
  else
    report fail "python3 $file -> exit $actual (expected $code), output should match /$pattern/:" "$out"
  fi
}

check() {
  local what=$1
  shift
  local out
  if out=$("$@" 2>&1); then report ok "" ""; else report fail "$what" "$out"; fi
}

for dir in "$data"/*/; do
  case_name=$(basename "$dir")
  [[ -f $dir/case.sh ]] || { report fail "no case.sh" ""; continue; }
  work="$scratch/$case_name"
  mkdir -p "$work"
  # shellcheck disable=SC1091
  # In a subshell, so that a case's `cd` or variables cannot leak into the next; it hands back
  # its own counts.
  (passed=0; failed=0
   cd "$dir" && source ./case.sh
   echo "$passed $failed" >"$work/.counts")
  read -r p f <"$work/.counts" || { p=0; f=1; echo "FAIL: ($case_name) case.sh did not finish"; }
  passed=$((passed + p))
  failed=$((failed + f))
done

echo "defects-2: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
