#!/usr/bin/env bash
# scripts/gpu-check.sh without a GPU: one line naming why, exit 2, nothing written. The no-GPU
# answer is forced (an nvidia-smi that fails, one that lists no GPU, one that is not there), so
# that the test does not start the 10-minute check on a machine that has a GPU.
# Usage: gpu_check_test.sh PATH/TO/comptrain PATH/TO/source-tree
set -u
source "$(dirname "$0")/check_lib.sh" "$@"
root=$(realpath "$src")
printf '#!/bin/sh\necho "No devices were found"\nexit 0\n' >"$work/empty-smi"
chmod +x "$work/empty-smi"
for smi in false "$work/empty-smi" "$work/missing-smi"; do
  output=$(cd "$work" && GPU_CHECK_NVIDIA_SMI=$smi OUT= bash "$root/scripts/gpu-check.sh" 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] || fail "$smi: exit $rc, expected 2"
  [[ $(printf '%s\n' "$output" | wc -l) -eq 1 ]] || fail "$smi: expected one line, got: $output"
  [[ $output == "gpu-check: no NVIDIA GPU on this machine"* ]] || fail "$smi: unexpected message: $output"
  [[ ! -e $work/gpu-check ]] || fail "$smi: wrote $work/gpu-check without a GPU"
done
finish gpu_check_test
