#!/usr/bin/env python3
"""Writes the Chakra .et fixtures of this directory (README.md), standard library only.

The protobuf wire format is encoded here by hand from the field numbers of Chakra's
schema/protobuf/et_def.proto (github.com/mlcommons/chakra at 21585d8f2d65603d791d2121e3d4632351120262),
independently of libprotobuf and of comptrain's traces/import/proto/chakra_et.proto, so that the
importer is tested against a second encoder. The file layout is that of Chakra's
third_party/utils/protolib.py encodeMessage: each message preceded by its length as a base-128
varint; a GlobalMetadata message first, then the nodes.

Run: /usr/bin/python3 make_chakra_et.py  (rewrites chakra.et and corrupt_et_*.et)
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# et_def.proto field numbers.
META_VERSION, META_ATTR = 1, 2
NODE_ID, NODE_NAME, NODE_TYPE, NODE_CTRL, NODE_DATA, NODE_START, NODE_DUR, NODE_IN, NODE_OUT, NODE_ATTR = range(1, 11)
IO_VALUES, IO_SHAPES, IO_TYPES = 1, 2, 3
ATTR_NAME = 1
ATTR_FIELDS = {"double_val": (3, "double"), "int64_val": (9, "varint"), "int64_list": (10, "int64_list"),
               "uint64_val": (13, "varint"), "bool_val": (27, "varint"), "string_val": (29, "bytes")}
NODE_TYPES = {"COMP_NODE": 4, "COMM_COLL_NODE": 7}


def varint(value):
    value &= (1 << 64) - 1  # negative int64 values are their two's complement, 10 bytes
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(0x80 | bits)
        else:
            out.append(bits)
            return bytes(out)


def key(field, wire_type):
    return varint(field << 3 | wire_type)


def f_varint(field, value):
    return key(field, 0) + varint(value)


def f_bytes(field, data):
    if isinstance(data, str):
        data = data.encode()
    return key(field, 2) + varint(len(data)) + data


def f_packed(field, values):  # proto3 packs repeated scalars
    return f_bytes(field, b"".join(varint(v) for v in values)) if values else b""


def attribute(attr):
    out = f_bytes(ATTR_NAME, attr["name"])
    for name, (field, kind) in ATTR_FIELDS.items():
        if name not in attr:
            continue
        value = attr[name]
        if kind == "varint":
            out += f_varint(field, int(value))
        elif kind == "double":
            out += key(field, 1) + struct.pack("<d", value)
        elif kind == "bytes":
            out += f_bytes(field, value)
        else:
            out += f_bytes(field, f_packed(1, value))
    return out


def metadata(version, attrs=()):
    return f_bytes(META_VERSION, version) + b"".join(f_bytes(META_ATTR, attribute(a)) for a in attrs)


def node(n):
    out = f_varint(NODE_ID, n["id"]) + f_bytes(NODE_NAME, n["name"]) + f_varint(NODE_TYPE, NODE_TYPES[n.get("type", "COMP_NODE")])
    out += f_packed(NODE_CTRL, n.get("ctrl_deps", [])) + f_packed(NODE_DATA, n.get("data_deps", []))
    if "duration_micros" in n:
        out += f_varint(NODE_DUR, n["duration_micros"])
    for field, io in ((NODE_IN, "inputs"), (NODE_OUT, "outputs")):
        if io in n:
            out += f_bytes(field, f_bytes(IO_VALUES, n[io]["values"]) + f_bytes(IO_SHAPES, n[io]["shapes"]) + f_bytes(IO_TYPES, n[io]["types"]))
    out += b"".join(f_bytes(NODE_ATTR, attribute(a)) for a in n.get("attr", []))
    return out


def delimited(message):
    return varint(len(message)) + message


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


# chakra.et: the five nodes of chakra.json, in snake_case with numeric ids (the camelCase node of
# that file is the same node in protobuf's JSON mapping).
with open(os.path.join(HERE, "chakra.json")) as f:
    doc = json.load(f)
CAMEL = {"dataDeps": "data_deps", "ctrlDeps": "ctrl_deps", "durationMicros": "duration_micros", "int64Val": "int64_val"}
nodes = []
for n in doc["nodes"]:
    n = {CAMEL.get(k, k): v for k, v in n.items()}
    n["id"] = int(n["id"])
    n["type"] = {4: "COMP_NODE"}.get(n["type"], n["type"])
    n["data_deps"] = [int(d) for d in n["data_deps"]]
    n["duration_micros"] = int(n["duration_micros"])
    n["attr"] = [{CAMEL.get(k, k): v for k, v in a.items()} for a in n["attr"]]
    nodes.append(n)
meta = delimited(metadata(doc["global_metadata"]["version"]))
encoded = [delimited(node(n)) for n in nodes]
good = meta + b"".join(encoded)
write("chakra.et", good)

# Cut inside the length prefix of the first node: a two-byte varint (0x80 continues) then EOF.
write("corrupt_et_truncated_prefix.et", meta + b"\x80")
# Cut inside the last node: its length prefix promises more than the file holds.
write("corrupt_et_truncated.et", good[:-5])
# A node of 2 bytes whose key has wire type 7, which does not exist.
write("corrupt_et_bad_message.et", meta + encoded[0] + delimited(b"\x0f\x01"))
# A node depending on node 99, which is not in the file (as corrupt_chakra_dep.json).
bad = dict(nodes[2], data_deps=[99])
write("corrupt_et_missing_parent.et", meta + encoded[0] + encoded[1] + delimited(node(bad)) + b"".join(encoded[3:]))
# A trace written by comptrain (comptrain.* attributes) whose node reads tensor 7, absent from
# the tensor table.
comptrain_meta = metadata("0.0.4", [
    {"name": "comptrain.format", "string_val": "comptrain-trace"},
    {"name": "comptrain.name", "string_val": "tiny"},
    {"name": "comptrain.batch_size", "int64_val": 2},
    {"name": "comptrain.tensors", "string_val": json.dumps(
        [{"id": 1, "name": "x", "dtype": "f32", "shape": [2, 4], "role": "input", "batch_dim": 0},
         {"id": 2, "name": "y", "dtype": "f32", "shape": [2, 4], "role": "temporary", "batch_dim": 0}])},
])
comptrain_node = {"id": 0, "name": "relu", "inputs": {"values": "[[7, 7, 0, 8, 4, \"\"]]", "shapes": "[[2, 4]]", "types": "[\"Tensor(float)\"]"},
                  "outputs": {"values": "[[2, 2, 0, 8, 4, \"\"]]", "shapes": "[[2, 4]]", "types": "[\"Tensor(float)\"]"},
                  "attr": [{"name": "comptrain.phase", "string_val": "forward"}, {"name": "comptrain.kind", "string_val": "relu"},
                           {"name": "comptrain.flops", "int64_list": [0, 4]}, {"name": "comptrain.bytes_read", "int64_list": [0, 16]},
                           {"name": "comptrain.bytes_written", "int64_list": [0, 16]}]}
write("corrupt_et_missing_tensor.et", delimited(comptrain_meta) + delimited(node(comptrain_node)))
# The same with tensor 1 read: a valid two-tensor, one-op comptrain trace.
comptrain_node["inputs"]["values"] = "[[1, 1, 0, 8, 4, \"\"]]"
write("tiny_comptrain.et", delimited(comptrain_meta) + delimited(node(comptrain_node)))
# gzip's magic: Chakra's readers accept .et.gz, comptrain asks for it to be decompressed.
write("corrupt_et_gzip.et", b"\x1f\x8b\x08\x00" + good[:16])
