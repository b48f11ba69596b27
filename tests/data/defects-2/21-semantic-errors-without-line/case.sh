# shellcheck shell=bash
# 21, the hf_config parts: an error of the config (read, or found when the model is built) carries
# the scenario's file:line:col of hf_config and the config's field.
expect 2 "s-kv\.yaml:1:[0-9]+: model: num_key_value_heads: 3 does not divide the 4 attention heads \(.*config\.json\)" -- simulate s-kv.yaml
expect 2 "s-missing\.yaml:1:[0-9]+: model\.hf_config: cannot read '.*missing\.json'" -- simulate s-missing.yaml
# A trace file that cannot be read: the scenario's model.trace line, then the file.
expect 2 "s-trace-missing\.yaml:1:[0-9]+: model\.trace: cannot read '.*missing-trace\.json'" -- simulate s-trace-missing.yaml

# scenario and validate parts
# What is checked against the platform when the scenario is prepared names the line and column of
# the key that is wrong; a validation table's point, the table and its line.
expect 2 "s-nodes\.yaml:4:22: parallelism\.nodes: 141 node\(s\) on platform 'dgx-a100-superpod' .*which has 140 \(network\.nodes\); expected at most 140" -- simulate s-nodes.yaml
expect 2 "s-storage\.yaml:4:65: data\.from: the platform 'perlmutter-gpu' has no storage\.local; expected a platform with a .storage: \{local: \.\.\.\}. section" -- simulate s-storage.yaml
expect 2 "t\.jsonl:1: checkpoint\.to: the platform 'perlmutter-gpu' has no storage\.local; expected a platform with a .storage: \{local: \.\.\.\}. section" -- validate t.jsonl
