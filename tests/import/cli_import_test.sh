#!/usr/bin/env bash
# `comptrain trace import` end to end: imports each good fixture (exit 0, a trace that `trace
# show` reads, what is missing on stderr) and rejects each corrupt one with exit 2.
# Usage: cli_import_test.sh COMPTRAIN DATA_DIR
set -uo pipefail
comptrain=$1
data=$2/import
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
for f in profiler_legacy profiler_kineto memory_snapshot chakra; do
  if ! "$comptrain" trace import "$data/$f.json" -o "$dir/$f.trace.json" 2> "$dir/$f.err"; then
    echo "FAIL: import $f"; cat "$dir/$f.err"; fail=1; continue
  fi
  grep -q '^missing: ' "$dir/$f.err" || { echo "FAIL: $f: no 'missing:' lines"; fail=1; }
  "$comptrain" trace show "$dir/$f.trace.json" > /dev/null || { echo "FAIL: trace show $f"; fail=1; }
done
grep -q 'peak 14680064 bytes' "$dir/memory_snapshot.err" || { echo "FAIL: snapshot peak"; fail=1; }
"$comptrain" trace import "$data/memory_snapshot.p4.pickle" -o "$dir/p.json" 2> "$dir/p.err" && grep -q 'peak 14680064 bytes' "$dir/p.err" ||
  { echo "FAIL: pickled snapshot"; cat "$dir/p.err"; fail=1; }
# The format can be named; naming the wrong one is an error at the missing field, exit 2.
"$comptrain" trace import "$data/chakra.json" --format chakra-json -o "$dir/c.json" 2> /dev/null || { echo "FAIL: --format"; fail=1; }
"$comptrain" trace import "$data/chakra.json" --format memory-snapshot -o "$dir/c.json" 2> "$dir/wrong.err"
[[ $? -eq 2 ]] && grep -q '/segments: missing' "$dir/wrong.err" || { echo "FAIL: wrong --format"; cat "$dir/wrong.err"; fail=1; }
for f in "$data"/corrupt_*; do
  "$comptrain" trace import "$f" -o "$dir/bad.json" 2> "$dir/bad.err"
  rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL: $(basename "$f"): exit $rc, expected 2"; fail=1; fi
  grep -q 'comptrain: error: ' "$dir/bad.err" || { echo "FAIL: $(basename "$f"): no error message"; fail=1; }
done
# Adversarial inputs (make_adversarial.py): exit 2 naming the file, where, and what was exceeded.
# The memo bomb stands for 2^60 values: it must be refused at once, not after a minute and a
# bad_alloc (timeout's 124 would fail the exit-code check).
expect_error() {  # FILE MESSAGE...
  local f=$1; shift
  timeout 10 "$comptrain" trace import "$data/$f" -o "$dir/adv.json" 2> "$dir/adv.err"
  local rc=$?
  [[ $rc -eq 2 ]] || { echo "FAIL: $f: exit $rc, expected 2"; cat "$dir/adv.err"; fail=1; return; }
  for m in "$f" "$@"; do
    grep -qF -- "$m" "$dir/adv.err" || { echo "FAIL: $f: no '$m' in the message"; cat "$dir/adv.err"; fail=1; }
  done
}
expect_error corrupt_pickle_memo_bomb.pickle ': byte ' 'expands to more than 1073741824 bytes'
expect_error corrupt_snapshot_overflow.json '/device_traces/0/1/size: the net bytes allocated by the history overflows int64'
expect_error corrupt_profiler_bytes_overflow.json '/traceEvents/1/args/Bytes: the bytes allocated before the first event'
# Chakra's binary trace (.et, issue 19). chakra.et holds chakra.json's nodes: the same report of
# what is missing; --format chakra-et names it.
"$comptrain" trace import "$data/chakra.et" -o "$dir/et.json" 2> "$dir/et.err" || { echo "FAIL: import chakra.et"; cat "$dir/et.err"; fail=1; }
"$comptrain" trace import "$data/chakra.json" -o "$dir/cj.json" 2> "$dir/cj.err"
diff <(grep '^missing: ' "$dir/et.err") <(grep '^missing: ' "$dir/cj.err") > /dev/null || { echo "FAIL: chakra.et and chakra.json miss different things"; fail=1; }
cp "$data/chakra.et" "$dir/chakra.bin"
"$comptrain" trace import "$dir/chakra.bin" --format chakra-et -o "$dir/et2.json" 2> /dev/null || { echo "FAIL: --format chakra-et"; fail=1; }
# export --format chakra (or a .et output) then import gives back the same trace file, byte for byte.
for model in resnet18 gpt2; do
  "$comptrain" trace export "$model" -b 2 -o "$dir/$model.json" 2> /dev/null
  "$comptrain" trace export "$model" -b 2 --format chakra -o "$dir/$model.bin" 2> /dev/null
  "$comptrain" trace export "$model" -b 2 -o "$dir/$model.et" 2> /dev/null
  cmp -s "$dir/$model.bin" "$dir/$model.et" || { echo "FAIL: $model: --format chakra and .et output differ"; fail=1; }
  "$comptrain" trace import "$dir/$model.et" -o "$dir/$model.back.json" 2> /dev/null || { echo "FAIL: import $model.et"; fail=1; }
  cmp -s "$dir/$model.json" "$dir/$model.back.json" || { echo "FAIL: $model: export -> .et -> import is not the same trace"; fail=1; }
  # trace show reads a .et as it reads the trace it holds.
  diff <("$comptrain" trace show "$dir/$model.et") <("$comptrain" trace show "$dir/$model.json") > /dev/null || { echo "FAIL: trace show $model.et"; fail=1; }
done
expect_error corrupt_et_truncated_prefix.et ': byte 8: the file ends inside the length prefix of Node message 1'
expect_error corrupt_et_truncated.et ': byte 263: Node message 5 is declared 48 bytes long but only 43 bytes follow'
expect_error corrupt_et_bad_message.et ': byte 76: Node message 2 (2 bytes) does not parse'
expect_error corrupt_et_missing_parent.et ': byte 112 (node message 3): /nodes/2/data_deps/0: no node has id 99'
expect_error corrupt_et_missing_tensor.et ': byte 308 (node message 1): /nodes/0/inputs/values[0]: no tensor has id 7'
expect_error corrupt_et_gzip.et ': byte 0: the file is gzip-compressed'
# Every truncation of a small .et is refused with exit 2 or read as a valid trace (exit 0), never
# a crash.
size=$(stat -c %s "$data/tiny_comptrain.et")
for ((cut = 0; cut < size; cut += 7)); do
  head -c "$cut" "$data/tiny_comptrain.et" > "$dir/cut.et"
  timeout 10 "$comptrain" trace import "$dir/cut.et" -o "$dir/cut.json" 2> "$dir/cut.err"
  rc=$?
  [[ $rc -eq 0 || $rc -eq 2 ]] || { echo "FAIL: tiny_comptrain.et cut at $cut bytes: exit $rc"; cat "$dir/cut.err"; fail=1; }
done
[[ $fail -eq 0 ]] && echo "OK: trace import"
exit $fail
