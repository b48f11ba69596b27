# shellcheck shell=bash
# 05: a BERT hidden size of 2^61 (and 2^60 heads) made 4 * hidden wrap to 0; now the field whose
# product overflows is named, at the scenario's line, from a config.json and from the zoo alike.
expect 2 "s\.yaml:1:[0-9]+: model\.hf_config: .*config\.json: 'hidden_size' is 2305843009213693952: the MLP width 4 \* hidden_size overflows 64 bits" -- trace show s.yaml
expect 2 "zoo\.yaml:1:[0-9]+: model: hidden: 2305843009213693952 makes the MLP width overflow 64 bits \(4 \* hidden 2305843009213693952\)" -- trace show zoo.yaml
