#!/usr/bin/env bash
# FSDP2's CPU offload (models/transforms/README.md, "FSDP2's CPU offload"): the shipped Llama 2
# 70B on one DGX H100 node fits with parallelism.fsdp.enable_cpu_offload and runs out of memory
# without it (the fp32 shards, gradients and AdamW moments, 16 bytes x 69 B / 8 = 128 GiB per GPU);
# with the offload the step is on the host and the report says so; a small model simulates with
# each policy form and with gradient accumulation.
# Usage: fsdp_offload_cli_test.sh PATH/TO/comptrain PATH/TO/source-tree
set -u
source "$(dirname "$0")/check_lib.sh" "$@"

shipped="$src/scenarios/llama2-70b-fsdp-offload-8xh100.yaml"
grep -q 'enable_cpu_offload: true' "$shipped" || fail "the shipped scenario no longer offloads"
out=$("$bin" simulate "$shipped" 2>&1)
[[ $? -eq 0 ]] || fail "the shipped scenario exited non-zero: $(tail -5 <<<"$out")"
grep -q '^FITS' <<<"$out" || fail "70 B with CPU offload does not fit: $(head -12 <<<"$out")"
grep -q 'PyTorch FSDP2 with CPU offload' <<<"$out" || fail "the report does not name the offload"
grep -Eq 'host CPU \(optimizer\) +[0-9]' <<<"$out" || fail "no step on the host in the time split"
# 16 bytes per parameter of a rank's shard (Llama 2 70B: 68,976,648,192 parameters / 8): 128.48 GiB.
grep -q 'host memory      128.48 GiB pinned per GPU' <<<"$out" || fail "host memory line: $(grep 'host memory' <<<"$out")"
# Without the offload (the model config named by its absolute path).
scenarios=$(realpath "$src/scenarios")
sed -e 's/, enable_cpu_offload: true}/}/' -e "s#hf_config: validation/#hf_config: $scenarios/validation/#" "$shipped" >"$work/without.yaml"
out=$("$bin" simulate "$work/without.yaml" 2>&1)
grep -q '^DOES NOT FIT' <<<"$out" || fail "70 B without CPU offload fits: $(head -8 <<<"$out")"

for policy in "offload_policy: cpu" "offload_policy: {kind: cpu, pin_memory: true}" "enable_cpu_offload: true"; do
  cat >"$work/small.yaml" <<YAML
model: {zoo: llama, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 32}
training: {batch_size: 2, precision: mixed, optimizer: adamw, gradient_accumulation_steps: 2}
platform: h100-80gb
parallelism: {gpus_per_node: 4, fsdp: {units: ["model.layers.*"], reshard_after_forward: all_but_last, $policy}}
YAML
  out=$("$bin" simulate "$work/small.yaml" 2>&1)
  [[ $? -eq 0 ]] || fail "'$policy' exited non-zero: $(tail -5 <<<"$out")"
  grep -q 'with CPU offload' <<<"$out" || fail "'$policy': the report does not name the offload"
done
# Refused where it is written (exit 2, file:line:col).
sed 's/enable_cpu_offload: true/offload_policy: nvme/' "$work/small.yaml" >"$work/bad.yaml"
out=$("$bin" simulate "$work/bad.yaml" 2>&1)
status=$?
[[ $status -eq 2 ]] || fail "offload_policy: nvme exited $status, expected 2"
grep -q "bad.yaml:4:" <<<"$out" || fail "offload_policy: nvme: no file:line in '$out'"
finish "fsdp offload cli"
