#!/usr/bin/env bash
# Proves comptrain's CUDA code on a machine with an NVIDIA GPU, in one command and under 10
# minutes, leaving a report and the files it made in one folder:
#   1. the GPU (nvidia-smi -q);
#   2. a build with CUDA for this GPU's architecture, in build-gpu/ (the comptrain executable,
#      the CUDA identity test, the CUDA kernel benchmark, the Python package);
#   3. the CUDA driver against the CPU driver: streams byte-identical and decodings bit-identical
#      on every data family of the property tests (NaN, Inf, denormals, huge ranges, lengths that
#      are no multiple of a block) and on tests/data/activations/ (kernels_cuda_identity_test);
#   4. the Python package's CUDA path: a CUDA tensor's stream equals the CPU's, and saved
#      activations compressed on the GPU inside a training step (the `cuda` cases of
#      tests/kernels/python/; they skip where PyTorch has no CUDA);
#   5. `comptrain calibrate --device cuda --quick --emit-platform`: the measured profile and the
#      platform file;
#   6. kernels_bench_cuda (szp and zeros on 2^26 post-ReLU-like values) beside cuSZp2's published
#      A100 average (332.42 GB/s compress, 513.04 GB/s decompress; calibrate/README.md).
#   7. calibrate/index_pace.py: PyTorch's index_select, index_add_ and scatter_add_ paces on this
#      GPU beside the op-time model's constants (skipped where this PyTorch has no CUDA).
# Each step has a time limit; a failed step is reported and the next ones still run.
# Without a GPU (no nvidia-smi, or it lists none) it says so in one line and exits 2.
#
# Usage: scripts/gpu-check.sh [FOLDER]
#   FOLDER (default: $OUT when set, as on the device machine, else ./gpu-check) receives
#   report.md, the logs and the emitted files. Exit 0 when every step passed, 1 otherwise.
# GPU_CHECK_NVIDIA_SMI names the nvidia-smi to ask (default: nvidia-smi; the tests set it to a
# command that fails, to check the no-GPU answer on machines that have one); GPU_CHECK_BUILD_DIR
# the build folder (default: build-gpu/ of the repository).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
smi=${GPU_CHECK_NVIDIA_SMI:-nvidia-smi}

if ! gpus=$("$smi" -L 2>/dev/null) || ! grep -q '^GPU ' <<<"$gpus"; then
  echo "gpu-check: no NVIDIA GPU on this machine ($smi -L lists none); nothing to check" >&2
  exit 2
fi

out=${1:-${OUT:-$PWD/gpu-check}}
mkdir -p "$out/logs" || exit 1
out=$(cd "$out" && pwd)
report="$out/report.md"
build=${GPU_CHECK_BUILD_DIR:-$root/build-gpu}
start=$SECONDS
failed=0

{
  echo "# gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "Commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo
  echo '```'
  echo "$gpus"
  echo '```'
  echo
  echo "| step | result | seconds | log |"
  echo "|---|---|---|---|"
} >"$report"

# step NAME LIMIT_SECONDS SCRIPT: runs the bash SCRIPT with a time limit (the exported variables
# below in its environment), its output in logs/NAME.log, and adds a row to the report.
step() {
  local name=$1 limit=$2 script=$3
  local t0=$SECONDS result
  timeout --kill-after=10 "$limit" bash -c "set -o pipefail; $script" >"$out/logs/$name.log" 2>&1
  local rc=$?
  case $rc in
    0) result=passed ;;
    124 | 137) result="**timed out** (${limit} s)"; failed=1 ;;
    *) result="**failed** (exit $rc)"; failed=1 ;;
  esac
  echo "| $name | $result | $((SECONDS - t0)) | logs/$name.log |" >>"$report"
  echo "gpu-check: $name: $result ($((SECONDS - t0)) s)"
  return $rc
}

"$smi" -q >"$out/gpu.txt" 2>&1
# This GPU's architecture beside the default sm_80 and sm_90 (compute capability 9.0 -> 90).
cap=$("$smi" --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
archs="80;90"
[[ $cap =~ ^[0-9]+$ && $cap != 80 && $cap != 90 ]] && archs="$archs;$cap"

export root build out archs
if step build 420 'cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
      "-DCOMPTRAIN_CUDA_ARCHITECTURES=$archs" &&
    cmake --build "$build" --parallel "$(nproc)" --target comptrain kernels_cuda_identity_test kernels_bench_cuda \
      comptrain_codecs_kernels comptrain_codecs_kernels_cuda'; then
  step cuda_identity 120 '"$build/tests/kernels_cuda_identity_test" "--gtest_output=xml:$out/cuda_identity.xml"'
  step python_cuda 120 'cd "$root/tests/kernels/python" &&
    PYTHONPATH="$build/kernels/python" COMPTRAIN_CLI="$build/cli/comptrain" /usr/bin/python3 -m unittest -v -k cuda codecs_test activations_test'
  step calibrate 240 '"$build/cli/comptrain" calibrate --device cuda --quick -o "$out/profile.yaml" --emit-platform "$out/platform.yaml"'
  step kernels_bench 120 '"$build/kernels/kernels_bench_cuda" 67108864 10'
fi
step index_pace 120 '/usr/bin/python3 "$root/calibrate/index_pace.py" --skip-without-cuda'

{
  echo
  echo "Total: $((SECONDS - start)) s."
  if [[ -f $out/logs/python_cuda.log ]]; then
    echo
    echo "Python CUDA cases: $(grep -cE '\.\.\. ok$' "$out/logs/python_cuda.log") passed, $(grep -cE '\.\.\. skipped' "$out/logs/python_cuda.log") skipped (a skip: this PyTorch has no CUDA)."
  fi
  if [[ -f $out/logs/kernels_bench.log ]]; then
    echo
    echo "kernels_bench_cuda (GB = 10^9 bytes of input per second), beside cuSZp2's published A100 average"
    echo "(SC'24: 332.42 GB/s compress, 513.04 GB/s decompress; calibrate/README.md):"
    echo
    echo '```'
    cat "$out/logs/kernels_bench.log"
    echo '```'
  fi
  if [[ -f $out/logs/index_pace.log ]]; then
    echo
    echo "PyTorch's indexed kernels on this GPU beside the op-time model's paces (models/README.md, \"Kernel traffic\"):"
    echo
    echo '```'
    cat "$out/logs/index_pace.log"
    echo '```'
  fi
} >>"$report"
echo "gpu-check: report in $report"
exit $failed
