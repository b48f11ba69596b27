# shellcheck shell=bash
# 21, the hf_config parts: an error of the config (read, or found when the model is built) carries
# the scenario's file:line:col of hf_config and the config's field.
expect 2 "s-kv\.yaml:1:[0-9]+: model: num_key_value_heads: 3 does not divide the 4 attention heads \(.*config\.json\)" -- simulate s-kv.yaml
expect 2 "s-missing\.yaml:1:[0-9]+: model\.hf_config: cannot read '.*missing\.json'" -- simulate s-missing.yaml
