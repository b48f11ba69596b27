#!/usr/bin/env bash
# A captured trace replays: capture resnet18 at batch 4 on the CPU, then `comptrain simulate` a
# scenario whose model is that trace file, on a shipped platform, at its own batch and rescaled.
# Usage: capture_simulate_test.sh COMPTRAIN CAPTURE_SCRIPT. Exit 77 (skipped) without torch.
set -euo pipefail
comptrain=$1
script=$2
python=/usr/bin/python3
if ! "$python" -c 'import torch, torchvision' >/dev/null 2>&1; then
  echo "SKIP: torch/torchvision not importable from $python (apt-get install python3-torch python3-torchvision)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" "$script" resnet18 --batch 4 -o "$dir/resnet18-b4.json"
"$comptrain" trace show "$dir/resnet18-b4.json" > "$dir/show.txt"
cat > "$dir/scenario.yaml" <<YAML
name: resnet18-captured
model:
  trace: resnet18-b4.json
platform: a100-40gb
strategy: baseline
YAML
"$comptrain" simulate "$dir/scenario.yaml" --json > "$dir/report.json"
"$comptrain" simulate "$dir/scenario.yaml" --batch 16 > "$dir/report16.txt"
"$python" - "$dir/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
text = json.dumps(report)
assert '"batch' in text, 'no batch in the report'
print('simulate report keys:', sorted(report)[:12])
PY
echo "OK: captured resnet18 (batch 4) replays"
