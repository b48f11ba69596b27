#!/usr/bin/env bash
# The main job: installs, builds, and runs comptrain on the embedded default scenario
# (scenarios/default.yaml: ResNet-50, batch 32, fp32, SGD with momentum), printing its report.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/build.sh" >&2
# Replays one ResNet-50 iteration on the modeled A100 (SimGrid) and prints the report.
exec "$root/build/cli/comptrain" simulate
