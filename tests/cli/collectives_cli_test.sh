#!/usr/bin/env bash
# NCCL's algorithm option, `collectives.algorithm` of a platform (scenarios/platforms/README.md,
# "Clusters"): a bad value exits 2 naming the platform file, the line and column, and the field; a
# good one (auto, ring, tree) runs. The platform is the shipped DGX A100 cluster with one line
# added under `collectives:`, read from a scenario of 2 nodes x 8 GPUs under DDP.
# Usage: collectives_cli_test.sh PATH/TO/comptrain PATH/TO/source-tree
set -u
source "$(dirname "$0")/check_lib.sh" "$@"

# scenario NAME ALGORITHM: p-NAME.yaml (the cluster with `algorithm: ALGORITHM`) and s-NAME.yaml.
scenario() {
  sed "s/^\(  network_overhead: .*\)$/\1\n  algorithm: $2/" "$src/scenarios/platforms/dgx-a100-superpod.yaml" >"$work/p-$1.yaml"
  grep -qFx "  algorithm: $2" "$work/p-$1.yaml" || fail "no algorithm line added to the platform"
  cat >"$work/s-$1.yaml" <<YAML
model: {zoo: gpt2, layers: 2}
training: {batch_size: 2, precision: mixed}
platform: p-$1.yaml
parallelism: {nodes: 2, gpus_per_node: 8}
YAML
}

# expect CODE REGEX NAME: `comptrain simulate s-NAME.yaml` exits CODE and prints REGEX.
expect() {
  local out status
  out=$(cd "$work" && "$bin" simulate "s-$3.yaml" 2>&1)
  status=$?
  [[ $status -eq $1 ]] || fail "simulate s-$3.yaml exited $status, expected $1; output: $(tail -5 <<<"$out")"
  grep -Eq -- "$2" <<<"$out" || fail "simulate s-$3.yaml printed no match for '$2'; output: $(tail -5 <<<"$out")"
  grep -q 'internal error' <<<"$out" && fail "simulate s-$3.yaml: internal error"
}

line=$(($(grep -n '^  network_overhead:' "$src/scenarios/platforms/dgx-a100-superpod.yaml" | cut -d: -f1) + 1))
scenario bad butterfly
expect 2 "comptrain: error: .*p-bad\.yaml:$line:14: 'collectives\.algorithm' is 'butterfly'; expected auto .*, ring or tree" bad
scenario list '[ring]'
expect 2 "p-list\.yaml:$line:14: 'collectives\.algorithm' is" list
for algorithm in auto ring tree RING; do
  scenario "$algorithm" "$algorithm"
  expect 0 'iteration' "$algorithm"
done
# The option reaches the replay, and NCCL's choice is made per all-reduce: the time in collectives
# differs between ring and tree, and NCCL's own choice is neither everywhere (DDP's 1 and 25 MiB
# buckets run trees, below the 36 MB where NCCL's model switches to rings on 2 DGX A100 nodes; the
# bucket of the token embedding's gradient, larger, runs a ring: sim/README.md, "Clusters and collectives").
communication() { (cd "$work" && "$bin" simulate "s-$1.yaml" 2>&1 | grep -m1 'in collectives'); }
[[ -n "$(communication ring)" ]] || fail "no communication line"
[[ "$(communication ring)" != "$(communication tree)" ]] || fail "ring and tree take the same time: $(communication ring)"
[[ "$(communication auto)" != "$(communication ring)" ]] || fail "NCCL's choice is the ring everywhere: $(communication auto)"
[[ "$(communication auto)" != "$(communication tree)" ]] || fail "NCCL's choice is the tree everywhere: $(communication auto)"
[[ "$(communication RING)" == "$(communication ring)" ]] || fail "RING is not ring"
finish "collectives cli"
