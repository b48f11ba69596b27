# shellcheck shell=bash
# 16: a Chakra trace of no node is refused at import (JSON and .et, where a node would be), and a
# trace file of no op by the trace reader, so nothing "fits" in 0 s.
expect 2 "empty\.json: /nodes: no nodes; expected at least one Chakra node" -- trace import empty.json -o "$work/t2.json"
expect 2 "empty\.et: byte 8 \(no Node message after the global metadata\): /nodes: no nodes; expected at least one Chakra node" -- trace import empty.et -o "$work/t.json"
check "no t.json after a refused import" test ! -e "$work/t.json"
expect 2 "t\.json: /ops: an empty array; expected at least one op" -- simulate s.yaml
expect 2 "t\.json: /ops: an empty array; expected at least one op" -- plan s.yaml -q
expect 2 "t\.json: /ops: an empty array; expected at least one op" -- trace show t.json
