# Checkpoint chunks are bounded (at most 100,000 per checkpoint and node), at the field's line,
# before anything runs.
expect 2 's\.yaml:5:45: checkpoint\.chunk: a chunk of 1 bytes cuts the node.s [0-9]+-byte checkpoint into [0-9]+ chunks.*expected at most 100000 per checkpoint' -- simulate s.yaml
# The validation point: 2^50 bytes per GPU in the default 64 MiB chunks (16 M of them), then 1-byte chunks.
expect 2 't\.jsonl:1: .*checkpoint\.bytes_per_gpu.*checkpoint\.chunk_bytes.*into 67108864 chunks.*expected at most 100000' -- validate t.jsonl
sed 's/"every": 1}/"every": 1, "chunk_bytes": 1}/; s/1125899906842624/1000000/' t.jsonl > "$work/t.jsonl"
expect 2 't\.jsonl:1: .*into 4000000 chunks.*expected at most 100000' -- validate "$work/t.jsonl"
