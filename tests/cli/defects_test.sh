#!/usr/bin/env bash
# Regression test for every input in tests/data/defects/ (copied from shared/defects/, found by
# feeding comptrain adversarial inputs): each must end with exit 2 and a message naming the file,
# the location and what was expected, quickly, or run correctly. Never a crash, a hang, an
# internal error, or a result built on a non-finite number.
# Usage: defects_test.sh PATH/TO/comptrain PATH/TO/tests/data/defects
set -u
bin=$(realpath "$1")
data=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

# expect DIR CODE PATTERN -- ARGS...: runs comptrain ARGS in DIR (within 60 s), checks the exit
# code and that the combined output matches the extended regular expression PATTERN.
expect() {
  local dir=$1 code=$2 pattern=$3
  shift 4
  local out actual
  out=$(cd "$data/$dir" && timeout 60 "$bin" "$@" 2>&1)
  actual=$?
  if [[ $actual -eq $code ]] && grep -Eq -- "$pattern" <<<"$out" && ! grep -q 'internal error' <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: ($dir) comptrain $* -> exit $actual (expected $code), output should match /$pattern/:"
    sed 's/^/    /' <<<"$out" | head -20
  fi
}

# 01: a pickle of 60 nested tuples sharing halves (2^60 leaves): bounded expansion.
expect 01-pickle-memo-bomb 2 'bomb.pickle: byte [0-9]+: .*expands to more than' -- trace import bomb.pickle --format memory-snapshot -o "$work/o.json"
# 02: forged variant counts and labels.
expect 02-merge-variant-count 2 'neg.json: /sweep/variant_count is -1; expected an integer from 1 to' -- merge neg.json
expect 02-merge-variant-count 2 'huge.json: /sweep/variant_count is 1000000000000; expected' -- merge huge.json
expect 02-merge-variant-count 2 'string.json: /sweep/variant_count is "3"; expected' -- merge string.json
expect 02-merge-variant-count 2 'label-int.json: /variants/0/label: expected a string' -- merge label-int.json label-int.json
# 03: a range next to the int64 limit: two values, each refused by the model (bytes overflow).
expect 03-sweep-range-int64-overflow 2 'variant 0 \(training.batch_size=9223372036854775800\): s.yaml:2:[0-9]+: model: .*overflows' -- simulate s.yaml -q
# 04: a sweep key index beyond 2^64.
expect 04-sweep-index-stoull 2 "s.yaml:6:3: bad sweep key .*index 99999999999999999999 is too large" -- simulate s.yaml
# 05, 06, 07: absurd platform numbers, trace durations and codec latencies rejected at load.
expect 05-platform-inf-bandwidth-simgrid-abort 2 "p.yaml:23:14: 'host_link.bandwidth' is 1e300 GB/s; expected between" -- simulate s.yaml
expect 06-platform-tiny-peak-internal-error 2 "p.yaml:7:11: 'gpu.peak.fp32' is 1e-300 FLOP/s; expected between" -- simulate s.yaml
expect 07-simgrid-deadlock-silent-wrong-result 2 "p.yaml:5:21: 'gpu.memory_bandwidth' is 1e-300 B/s; expected between" -- simulate s.yaml
expect 07-simgrid-deadlock-silent-wrong-result 2 't.json: /ops/2/measured/seconds: found the number 1e\+300; expected a duration of at most 3600' -- simulate s2.yaml
expect 07-simgrid-deadlock-silent-wrong-result 2 "s3.yaml:7:96: 'strategy.rules\[0\].compress.latency' is 1e300 s; expected between 0 s and 1 s" -- simulate s3.yaml
# 10: a szp quantisation step of 0 is refused at its offset; a count raised into the last block's
# padding is the valid stream of one more 0.0 (tests/kernels/stream_test.cpp says why) and decodes.
expect 10-stream-forged-count 2 'forged-step0.ctk: corrupted stream at byte 96: quantisation step 0 does not match' -- decompress forged-step0.ctk "$work/o0.npy"
expect 10-stream-forged-count 0 '' -- decompress forged.ctk "$work/o.npy"
# 13: running totals that overflow int64.
expect 13-import-signed-overflow 2 'snapshot-4x2\^62.json: /device_traces/0/[0-9]+/size: .*overflows int64' -- trace import 'snapshot-4x2^62.json' --format memory-snapshot -o "$work/o1.json"
expect 13-import-signed-overflow 2 'profiler-bytes-minus-2\^63.json: /traceEvents/[0-9]+/args/Bytes: .*overflows int64' -- trace import 'profiler-bytes-minus-2^63.json' --format pytorch-profiler -o "$work/o2.json"
# 15: integers range-checked before narrowing.
expect 15-int-truncation-silent 2 "s.yaml:7:38: 'strategy.rules\[0\].recompute.k' is '4294967299'; expected an integer from 1 to" -- simulate s.yaml --json
expect 15-int-truncation-silent 0 '"fits": true' -- simulate s-k3.yaml --json

echo "defects: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
