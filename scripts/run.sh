#!/usr/bin/env bash
# The main job: installs, builds, and runs the planner on the embedded default scenario
# (scenarios/default.yaml: ResNet-50, fp32, SGD with momentum, on an A100-40GB): for baseline,
# offload, sqrt(n) recomputation and conv-input compression at ratios 4 and 8, the largest batch
# within 95% of GPU memory (PyTorch's reserved memory, modelled) and the fastest batch. Prints the table; plots go to plots/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Builds only what it runs: the comptrain executable and its man page (not the tests, the
# benchmarks or the Python module; scripts/test.sh builds everything).
bash "$root/scripts/build.sh" --target comptrain --target comptrain_man >&2
exec "$root/build/cli/comptrain" plan --plots plots "$@"
