# shellcheck shell=bash
# 06: expert counts (10^12, 2^62, 10^9) and layers x experts (the shipped Qwen1.5-MoE at 8192
# layers) are bounded before building, with an estimate, at the scenario's line; more experts than
# routed token slots is the "no token" error, before a counter per expert is allocated.
expect 2 "s-1e12\.yaml:1:[0-9]+: model: num_experts: 1000000000000 experts in one layer make about 4e\+13 ops and 6e\+13 tensors \(.*experts-1e12\.json\); expected a model of at most 786432 ops" -- trace show s-1e12.yaml
expect 2 "s-2p62\.yaml:1:[0-9]+: model: num_experts: 4611686018427387904 experts in one layer make about 1\.84e\+20 ops" -- trace show s-2p62.yaml
expect 2 "s-1e9\.yaml:1:[0-9]+: model: num_experts: 1000000000 experts in one layer make about 4e\+10 ops" -- trace show s-1e9.yaml
expect 2 "s-layers\.yaml:1:[0-9]+: model: layers: 8192 layers, 8192 of them with 60 experts, make about 1\.97e\+07 ops and 2\.95e\+07 tensors in the experts alone .*at most 786432 ops" -- trace show s-layers.yaml
expect 2 "s-1000\.yaml:1:[0-9]+: model: moe: 1000 experts but a sequence of 64 tokens routes only 64 token slots \(seq_len \* num_experts_per_tok\), so expert 64 receives no token" -- trace show s-1000.yaml
# The shipped configuration at its own 24 layers still builds, with the published parameter count.
expect 0 "parameters +14,315,784,192" -- trace show s-layers.yaml --layers 24
