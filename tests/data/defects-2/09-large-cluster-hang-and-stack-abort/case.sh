# Every shipped cluster simulates at its full size now (sim/README.md, "Limits"): perlmutter-gpu's
# 1,536 nodes x 4 and dgx-h100-superpod's 2,048 x 8 (folded: node 0 whole, one endpoint host per
# other node; 1.1 s of CPU on the 2-core VM). A 100,000-node fat tree's 800,000 GPUs are refused
# at the parallelism line, before anything is built (at most 131,072).
expect 0 'GPUs +6144 \(1536 nodes x 4\)' -- simulate s-perlmutter.yaml
expect 0 'GPUs +16384 \(2048 nodes x 8\)' -- simulate s-h100.yaml
expect 2 's-1e5\.yaml:4:14: parallelism: 100000 node\(s\) x 8 GPUs: 800000 GPUs in the cluster; expected at most 131072' -- simulate s-1e5.yaml
# The same shape asked of the planner (plan.nodes) is refused at the plan section.
printf 'model: {zoo: gpt, layers: 2, hidden: 64, heads: 2, seq_len: 32, vocab: 100}\nplatform: %s\nplan: {nodes: [100000]}\n' "$PWD/p.yaml" > "$work/plan.yaml"
expect 2 'plan\.yaml:3:7: plan: 100000 node\(s\) x 8 GPUs: 800000 GPUs in the cluster; expected at most 131072' -- plan "$work/plan.yaml" -q
# The shipped clusters within the bound run at their documented full size: polaris 560 x 4
# (2,240 GPUs, 3.5 s on the 2-core VM) and dgx-a100-superpod 140 x 8.
sed 's/platform: perlmutter-gpu/platform: polaris/; s/nodes: 1536/nodes: 560/' s-perlmutter.yaml > "$work/s-polaris.yaml"
expect 0 'FITS' -- simulate "$work/s-polaris.yaml"
sed 's/platform: perlmutter-gpu/platform: dgx-a100-superpod/; s/nodes: 1536, gpus_per_node: 4/nodes: 140, gpus_per_node: 8/' s-perlmutter.yaml > "$work/s-a100.yaml"
expect 0 'GPUs +1120 \(140 nodes x 8\)' -- simulate "$work/s-a100.yaml"
