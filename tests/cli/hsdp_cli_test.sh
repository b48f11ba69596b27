#!/usr/bin/env bash
# HSDP (parallelism.fsdp.replicate; models/transforms/README.md, "FSDP2"): each GPU holds the
# shards that FSDP over one shard group holds, so a small Llama on 2 nodes x 4 GPUs as 2 replicas
# of 4 shards keeps the sharded parameters and optimizer state of FSDP on the 4 GPUs of one node;
# a replica count that does not divide the GPUs is refused at its line; the shipped example
# simulates.
# Usage: hsdp_cli_test.sh PATH/TO/comptrain PATH/TO/source-tree
set -u
source "$(dirname "$0")/check_lib.sh" "$@"

scenario() {  # NODES REPLICATE
  cat <<YAML
model: {zoo: llama, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 32}
training: {batch_size: 2, precision: mixed, optimizer: adamw}
platform: dgx-h100-superpod
parallelism:
  nodes: $1
  gpus_per_node: 4
  fsdp: {units: ["model.layers.*"], reshard_after_forward: all_but_last, reduce_dtype: fp32, replicate: $2}
YAML
}
# state FILE: the sharded model state among the largest buffers at the peak (name and bytes).
state() { "$bin" simulate "$1" 2>&1 | grep -E '(sharded parameters|optimizer state partition) \(1/' | awk '{ print $1, $2, $4, $5, $6, $7 }' | sort; }

scenario 1 1 >"$work/fsdp.yaml"
scenario 2 2 >"$work/hsdp.yaml"
flat=$(state "$work/fsdp.yaml")
hybrid=$(state "$work/hsdp.yaml")
# Each GPU holds the 4-GPU FSDP's shards (the schedule's buffers are the same byte for byte:
# Fsdp.HsdpShardsWithinAGroupAndAllReducesTheShardsAcrossReplicas); the peaks differ with the
# timing (the all-reduces share the comm stream with the next all-gathers).
if [[ $(wc -l <<<"$flat") -ne 2 ]]; then
  fail "FSDP on 4 GPUs: the sharded state is not among the largest buffers: '$flat'"
elif [[ "$flat" != "$hybrid" ]]; then
  fail "HSDP 2 x 4 does not hold the 4-GPU FSDP's shards:"$'\n'"$flat"$'\n'"against"$'\n'"$hybrid"
fi
out=$("$bin" simulate "$work/hsdp.yaml" 2>&1)
grep -q 'PyTorch FSDP2 (HSDP: 2 replicas of 4 shards)' <<<"$out" || fail "the report does not say HSDP: $(head -12 <<<"$out")"

scenario 2 3 >"$work/bad.yaml"
out=$("$bin" simulate "$work/bad.yaml" 2>&1)
status=$?
[[ $status -eq 2 ]] || fail "replicate 3 on 8 GPUs exited $status (expected 2): $out"
grep -q "bad.yaml:7:.*'parallelism.fsdp.replicate' is 3 but the run has 8 GPUs; expected a divisor" <<<"$out" || fail "replicate 3: $out"

out=$("$bin" simulate "$src/scenarios/llama3-8b-hsdp-4x8xh100.yaml" 2>&1)
status=$?
[[ $status -eq 0 ]] || fail "the shipped HSDP example exited $status: $(tail -5 <<<"$out")"
finish "hsdp cli"
