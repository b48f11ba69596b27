#!/usr/bin/env bash
# calibrate/index_pace.py where there is no CUDA device (forced with CUDA_VISIBLE_DEVICES=, so
# that the test measures nothing on a machine that has one): exit 2 and one line saying why, or
# exit 0 and a "skipped" line with --skip-without-cuda (what scripts/gpu-check.sh passes); bad
# arguments exit 2 naming them; so does a model source it cannot read. Skipped (77) where /usr/bin/python3 cannot import torch.
# Usage: index_pace_test.sh PATH/TO/comptrain PATH/TO/source-tree
set -u
source "$(dirname "$0")/check_lib.sh" "$@"
script=$(realpath "$src")/calibrate/index_pace.py
python=/usr/bin/python3
"$python" -c 'import torch' 2>/dev/null || { echo "index_pace_test: torch not importable from $python: skipped"; exit 77; }
run() { CUDA_VISIBLE_DEVICES= "$python" "$script" "$@" 2>&1; }

output=$(run); rc=$?
[[ $rc -eq 2 ]] || fail "no CUDA: exit $rc, expected 2: $output"
[[ $output == "index_pace: torch "*" sees no CUDA device; nothing measured" ]] || fail "no CUDA: unexpected message: $output"
output=$(run --skip-without-cuda); rc=$?
[[ $rc -eq 0 ]] || fail "--skip-without-cuda: exit $rc, expected 0: $output"
[[ $output == "index_pace: skipped: torch "*" sees no CUDA device; nothing measured" ]] || fail "--skip-without-cuda: unexpected message: $output"
for bad in "--rows 0" "--width 100000" "--repeats 0" "--clock-ghz 100" "--clock-ghz nan"; do
  # shellcheck disable=SC2086
  output=$(run $bad --skip-without-cuda); rc=$?
  [[ $rc -eq 2 ]] || fail "$bad: exit $rc, expected 2: $output"
  [[ $output == index_pace:* && $output == *"${bad%% *}"* ]] || fail "$bad: the message does not name it: $output"
done
# It reads the model's paces from models/src/op_time.cpp: a copy of the script outside the source
# tree says which file it could not read.
cp "$script" "$work/index_pace.py"
output=$(CUDA_VISIBLE_DEVICES= "$python" "$work/index_pace.py" --skip-without-cuda 2>&1); rc=$?
[[ $rc -eq 2 && $output == *"op_time.cpp"* ]] || fail "outside the source tree: exit $rc, expected 2 naming op_time.cpp: $output"
finish index_pace_test
