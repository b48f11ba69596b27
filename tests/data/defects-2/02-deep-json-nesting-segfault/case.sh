# shellcheck shell=bash
# 02, the Hugging Face config.json and Chakra (.et and its JSON form) parts: a value nested
# 100,000 deep (200 KB, generated here) is refused at the 64-level limit before anything recurses,
# at the file, the field and where. (The validation table's line is added by its own fix.)
python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
deep = "[" * 100000 + "]" * 100000
with open(f"{work}/config.json", "w") as f:
    f.write('{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, '
            '"intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512, "hidden_act": ' + deep + '}')
with open(f"{work}/s.yaml", "w") as f:
    f.write("model: {hf_config: config.json, seq_len: 64}\ntraining: {batch_size: 1, precision: bf16, optimizer: adamw}\nplatform: h100-80gb\n")
# A .et as comptrain writes it (a GlobalMetadata message, varint length-prefixed), its
# comptrain.tensors attribute (AttributeProto field 29, string_val) holding the deep array.
def varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >= 0x80 else 0))
        n >>= 7
        if not n:
            return bytes(out)
def field(number, payload):  # a length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload
def attr(name, value):
    body = field(1, name.encode())
    body += varint(9 << 3) + varint(value) if isinstance(value, int) else field(29, value.encode())
    return field(2, body)
meta = field(1, b"0.0.4") + attr("comptrain.format", "comptrain-trace") + attr("comptrain.name", "t") + \
       attr("comptrain.batch_size", 1) + attr("comptrain.tensors", '[{"id": 0, "x": ' + deep + '}]')
with open(f"{work}/deep.et", "wb") as f:
    f.write(varint(len(meta)) + meta)
with open(f"{work}/deep-chakra.json", "w") as f:
    f.write('{"nodes": [{"id": 0, "name": "a", "attr": [{"name": "x", "string_val": ' + deep + '}]}]}')
PY
expect 2 "s\.yaml:1:[0-9]+: model\.hf_config: .*config\.json: 'hidden_act' is nested deeper than 64 levels; expected a Hugging Face config\.json" -- trace show "$work/s.yaml"
expect 2 "deep\.et: byte 0 \(the global metadata message\): /global_metadata/attr/3: comptrain\.tensors is nested deeper than 64 levels in the trace \(at /0/x/0/0/.*expected the trace format's tensors array" -- trace import "$work/deep.et" -o "$work/out.json"
check "no out.json after a refused import" test ! -e "$work/out.json"
expect 2 "deep-chakra\.json: /nodes/0/attr/0/string_val/0/0/.*: nested deeper than 64 levels; expected a document that nests at most 64 levels" -- trace import "$work/deep-chakra.json" -o "$work/out2.json"

# validation table part
# A field nested 100,000 deep (200 KB, generated here): the message shows its kind and size, and
# never dumps it (dump() recurses).
deep=$(head -c 100000 /dev/zero | tr '\0' '[')$(head -c 100000 /dev/zero | tr '\0' ']')
printf '{"id": %s}\n' "$deep" > "$work/t.jsonl"
expect 2 "t\.jsonl:1: field 'id': found an array of 1 item; expected a non-empty string" -- validate "$work/t.jsonl"
