#!/usr/bin/env bash
# A captured trace replays: capture resnet18 at batch 4 on the CPU, then `comptrain simulate` a
# scenario whose model is that trace file, on a shipped platform, at its own batch and rescaled;
# and the strategies act on it as on the zoo's resnet18: offload all, compress all and sqrt_n
# recomputation offload / compress / drop as many saved activations (as many bytes) in both, and
# lower the peak below the baseline's. (They once acted on none: the capture recorded autograd's
# `detach` of each saved tensor as a backward op writing a view of it.)
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
for strategy in offload compress sqrt_n; do
  case $strategy in
    offload) rules='strategy: offload' ;;
    compress) rules=$'strategy:\n  name: compress-all\n  rules:\n    - compress: {ratio: 4, compress_bandwidth: 300 GB/s, decompress_bandwidth: 500 GB/s, latency: 20 us}' ;;
    sqrt_n) rules=$'strategy:\n  name: sqrt-n\n  rules:\n    - recompute: {mode: sqrt_n}' ;;
  esac
  for model in 'trace: resnet18-b4.json' 'zoo: resnet18'; do
    file=$dir/$strategy-${model%%:*}.yaml
    printf 'name: resnet18-%s\nmodel: {%s}\ntraining: {batch_size: 4}\nplatform: a100-40gb\n%s\n' \
      "$strategy" "$model" "$rules" > "$file"
    "$comptrain" simulate "$file" --json > "${file%.yaml}.json"
  done
done
"$python" - "$dir" <<'PY'
import json, re, sys
directory = sys.argv[1]
def run(name):
    report = json.load(open(f'{directory}/{name}.json'))
    return report['strategy']['applied'], report['results']['memory']['peak_bytes']
_, baseline_peak = run('report')
for strategy, action in (('offload', 'offloaded'), ('compress', 'compressed'), ('sqrt_n', 'dropped')):
    (captured, peak), (zoo, _) = run(f'{strategy}-trace'), run(f'{strategy}-zoo')
    print(f'{strategy}: capture "{captured}", peak {peak} (baseline {baseline_peak}); zoo "{zoo}"')
    # The recomputed ops are aten ops on one side, the zoo's ops on the other: not compared.
    counts = re.sub(r'; recomputed ops.*', '', captured)
    assert counts == re.sub(r'; recomputed ops.*', '', zoo), f'{strategy}: the capture and the zoo differ'
    acted = int(re.search(action + r' (\d+)', captured).group(1))
    assert acted > 0, f'{strategy}: {action} no saved activation of the captured trace'
    assert peak < baseline_peak, f'{strategy}: peak {peak} not below the baseline {baseline_peak}'
PY
# An absolute error bound: each captured tensor's relative bound is it over the tensor's range
# (values.range), so tensors of one class get different ratios; the zoo has no ranges: exit 2.
# Conv inputs only: integer tensors (max-pool indices) carry no values, hence no range.
abs_rules=$'strategy:\n  name: compress-abs\n  rules:\n    - select: {inputs_of: [conv]}\n      compress: {profile: auto, codec: szp, error_bound: 0.01, error_bound_mode: abs}'
for model in 'trace: resnet18-b4.json' 'zoo: resnet18'; do
  printf 'name: resnet18-abs\nmodel: {%s}\ntraining: {batch_size: 4}\nplatform: a100-40gb\n%s\n' "$model" "$abs_rules" > "$dir/abs-${model%%:*}.yaml"
done
"$comptrain" simulate "$dir/abs-trace.yaml" > "$dir/abs.txt"
grep -q 'error bound 0.01 (absolute)' "$dir/abs.txt" || { echo "FAIL: the report does not say the bound is absolute"; cat "$dir/abs.txt"; exit 1; }
grep -Eq 'compressed [1-9][0-9]* ' "$dir/abs.txt" || { echo "FAIL: nothing compressed under an absolute bound"; cat "$dir/abs.txt"; exit 1; }
set +e
out=$("$comptrain" simulate "$dir/abs-zoo.yaml" 2>&1); code=$?
set -e
[[ $code -eq 2 && $out == *"error_bound_mode abs needs the value range"*"has none in the trace"* ]] || { echo "FAIL: abs bound on the zoo: exit $code, $out"; exit 1; }

echo "OK: captured resnet18 (batch 4) replays; offload, compress and sqrt_n act on it as on the zoo; absolute bounds use its ranges"
