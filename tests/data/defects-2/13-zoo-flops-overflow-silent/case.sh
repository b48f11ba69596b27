# shellcheck shell=bash
# 13: the zoo's FLOPs and bytes wrapped silently (vocab 2^50 reported a sixteenth of vocab 2^46's
# FLOPs, exit 0); an overflow now names the config field and the scenario's line. 2^46 still fits.
expect 2 "s-vocab-2p50\.yaml:1:[0-9]+: model: vocab_size: 1125899906842624 makes the LM head's FLOPs overflow 64 bits \(4 \* batch_size 1 \* seq_len 64 \* hidden_size 256 \* vocab_size 1125899906842624\)" -- trace show s-vocab-2p50.yaml
expect 2 "s-intermediate-2p50\.yaml:1:[0-9]+: model: intermediate_size: 1125899906842624 makes the MLP's FLOPs overflow 64 bits" -- trace show s-intermediate-2p50.yaml
expect 0 "FLOPs" -- trace show s-vocab-2p46.yaml
