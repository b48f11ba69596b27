#!/usr/bin/env bash
# Installs every build and test dependency of comptrain from Debian's packages.
# Idempotent: when everything is present it only checks (dpkg-query) and returns in well under a second.
# Must run as root (or with sudo available) on Debian 12 or later.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libsimgrid-dev            # event engine and network model (SimGrid s4u), found through pkg-config
  libboost-graph-dev        # the op DAG
  libyaml-cpp-dev           # scenarios
  libtomlplusplus-dev       # `comptrain import`: torchtitan's TOML job files
  libfmt-dev                # output formatting
  libcli11-dev              # command line
  nlohmann-json3-dev        # trace files (JSON)
  libgtest-dev libgmock-dev # unit tests
  libbenchmark-dev          # benchmarks
  libzfp-dev                # peer compressor we measure ourselves against
  clang libclang-rt-14-dev  # libFuzzer, for the decompression fuzz test
  gnuplot-nox               # SVG plots (plan and --plot), run as a program; -nox: no X11 on headless machines
  help2man                  # the man page comptrain.1, generated at build time from --help (optional: skipped without it)
  python3-torch python3-torchvision  # capture: traces/capture/comptrain_capture.py (/usr/bin/python3)
  pybind11-dev python3-dev  # kernels/python: the kernels as a Python module (comptrain_codecs) for /usr/bin/python3
  python3-sklearn           # its bundled digits dataset (offline) for comptrain_codecs.digits_training (skipped without it)
  coinor-libcbc-dev         # hybrid/: the MILP of `plan --hybrid` (COIN-OR CBC through its C interface; HiGHS is not packaged in Debian 12)
  libprotobuf-dev protobuf-compiler  # traces/import: MLCommons Chakra's binary execution traces (.et)
  slurm-wlm                 # tests/cli/slurm_plan_array_test.sh: scripts/plan-array.sbatch on a one-node Slurm (skipped without it)
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
