#!/usr/bin/env bash
# Gradient accumulation under sharded data parallelism (models/transforms/README.md, "Gradient
# accumulation"): the shipped 13 B GPT under ZeRO-3 on 8 GPUs peaks, with 3 micro-steps, within
# 10 % of its peak with 1 (every micro-step gathers, releases and reduce-scatters on its own;
# before, the gathered parameters and full gradients of every micro-step stayed: 54 GiB at 1
# micro-step, 125 at 3), and FSDP2 with gradient accumulation simulates.
# Usage: accumulation_cli_test.sh PATH/TO/comptrain PATH/TO/source-tree
set -u
source "$(dirname "$0")/check_lib.sh" "$@"

# peak FILE: the exact tensors' peak in bytes `comptrain simulate FILE` reports (empty if none).
peak() { "$bin" simulate "$1" 2>&1 | awk '/^  tensors \(exact\)/ { gsub(",", "", $5); print $5; exit }'; }

shipped="$src/scenarios/gpt13b-zero3-8gpu-accum.yaml"
grep -q '^  gradient_accumulation_steps: 3$' "$shipped" || fail "the shipped scenario no longer has 3 micro-steps"
sed 's/^  gradient_accumulation_steps: 3$/  gradient_accumulation_steps: 1/' "$shipped" >"$work/one.yaml"
three=$(peak "$shipped")
one=$(peak "$work/one.yaml")
if [[ -z "$three" || -z "$one" ]]; then
  fail "no peak reported (3 micro-steps: '$three', 1: '$one')"
elif ! awk -v a="$three" -v b="$one" 'BEGIN { exit !(a <= 1.10 * b && a >= b / 1.10) }'; then
  fail "13 B ZeRO-3: peak $three B with 3 micro-steps against $one B with 1 (more than 10 % apart)"
fi

# FSDP2 with 2 micro-steps runs, and reduce-scatters at each (twice the collectives' time of 1).
cat >"$work/fsdp.yaml" <<YAML
model: {zoo: llama, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 32}
training: {batch_size: 2, precision: mixed, optimizer: adamw, gradient_accumulation_steps: 2}
platform: h100-80gb
parallelism: {gpus_per_node: 4, fsdp: {units: ["model.layers.*"], reshard_after_forward: all_but_last}}
YAML
out=$("$bin" simulate "$work/fsdp.yaml" 2>&1)
status=$?
[[ $status -eq 0 ]] || fail "fsdp with gradient_accumulation_steps 2 exited $status: $(tail -5 <<<"$out")"
grep -q 'iteration' <<<"$out" || fail "fsdp with gradient_accumulation_steps 2: no iteration time: $(tail -5 <<<"$out")"
finish "accumulation cli"
