#!/usr/bin/env bash
# End to end: `comptrain calibrate --device cpu --quick` writes a profile, then a scenario whose
# compress rule uses that profile simulates ResNet-50, and the report names the profile and its
# fitted numbers. Also: a shipped literature profile picked by `profile: auto`.
# Usage: calibrate_cli_test.sh PATH/TO/comptrain
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

start=$SECONDS
if ! "$bin" calibrate --device cpu --quick -o "$work/p.yaml" >"$work/calibrate.out" 2>"$work/calibrate.err"; then
  fail "calibrate --quick exited $?"; cat "$work/calibrate.err"
fi
echo "calibrate --quick took $((SECONDS - start)) s"
grep -q '^format: comptrain-calibration-profile 2' "$work/p.yaml" || fail "profile has no format line"
grep -q 'provenance: measured' "$work/p.yaml" || fail "profile numbers are not marked measured"
grep -Eq 'calibrate: \[ *[0-9]+%\].*left' "$work/calibrate.err" || fail "no progress lines with a time estimate on stderr"
ls "$work" | grep -q 'tmp' && fail "temporary files left next to the profile"
# The summary is the result (stdout); progress and warnings are diagnostics (stderr).
grep -Eq '^  szp +compress +[0-9.e+-]+ s \+ B /' "$work/calibrate.out" || { fail "no szp summary on stdout"; cat "$work/calibrate.out"; }
grep -q 'calibrate: \[' "$work/calibrate.out" && fail "progress lines on stdout"
grep -q 'warning:' "$work/calibrate.out" && fail "warnings on stdout"
# "ratio at eb" only for codecs with an error bound: szp has it, fp16 (the lines after its
# compress line, up to the next codec) has none.
grep -Eq 'ratio post_relu +at eb 1e-3: ' "$work/calibrate.out" || fail "szp's ratio lines do not give the error bound"
awk '/^  fp16 /{f=1; next} /^  [a-z0-9]+ +compress/{f=0} f' "$work/calibrate.out" >"$work/fp16.out"
grep -q 'ratio generic' "$work/fp16.out" || { fail "no fp16 ratio lines"; cat "$work/calibrate.out"; }
grep -q 'at eb' "$work/fp16.out" && { fail "fp16 has no error bound, but its ratio is given at one"; cat "$work/fp16.out"; }
# Every warning names a codec and the figure against its threshold (calibrate/README.md).
if grep -v -E '^calibrate: |^comptrain calibrate: wrote ' "$work/calibrate.err" | grep -v -E \
    '^warning: [a-z0-9]+ (compress|decompress) time model: R² [0-9.-]+ is below 0\.9 |^warning: [a-z0-9]+ ratio model, class [a-z_]+: held-back max relative error [0-9]+ % exceeds 25 %$' \
    >"$work/other.err"; then
  fail "unexpected lines on stderr:"; cat "$work/other.err"
fi

cat >"$work/scenario.yaml" <<YAML
name: resnet50-calibrated
model: {zoo: resnet50}
training: {batch_size: 16}
platform: a100-40gb
strategy:
  name: compress-calibrated
  rules:
    - compress: {profile: p.yaml, codec: szp, error_bound: 1e-3}
YAML
"$bin" simulate "$work/scenario.yaml" >"$work/report.txt" 2>&1 || { fail "simulate with the measured profile exited $?"; cat "$work/report.txt"; }
grep -q 'compress rule 0: profile p (.*p.yaml), codec szp, error bound 0.001' "$work/report.txt" || { fail "report does not name the profile"; cat "$work/report.txt"; }
grep -q 'ratio post_relu' "$work/report.txt" || fail "report has no ratio per class"
grep -q 'GB/s \[measured\]' "$work/report.txt" || fail "report does not mark the measured time model"
"$bin" simulate --json "$work/scenario.yaml" >"$work/report.json" 2>&1 || fail "simulate --json exited $?"
grep -q '"ratio_source": "profile"' "$work/report.json" || fail "JSON report has no compression section"

sed -e 's/profile: p.yaml/profile: auto/' "$work/scenario.yaml" >"$work/auto.yaml"
"$bin" simulate "$work/auto.yaml" >"$work/auto.txt" 2>&1 || { fail "simulate with profile auto exited $?"; cat "$work/auto.txt"; }
grep -q 'profile a100-literature (embedded:a100-literature)' "$work/auto.txt" || { fail "auto did not pick a100-literature"; cat "$work/auto.txt"; }
grep -q 'GB/s \[literature\]' "$work/auto.txt" || fail "literature time model not marked"
# --platform re-picks `profile: auto` for the new GPU (and says so when none is made for it).
"$bin" simulate --platform h100-80gb "$work/auto.yaml" >"$work/auto-h100.txt" 2>&1 || { fail "auto with --platform h100-80gb exited $?"; cat "$work/auto-h100.txt"; }
grep -q 'profile h100-literature (embedded:h100-literature)' "$work/auto-h100.txt" || { fail "--platform did not re-pick the profile"; cat "$work/auto-h100.txt"; }
out=$("$bin" simulate --platform titanx-maxwell "$work/auto.yaml" 2>&1); code=$?
[[ $code -eq 2 && $out == *"compress.profile auto, platform titanx-maxwell"*"no shipped profile"* ]] || fail "auto for a platform without a profile: exit $code, $out"

sed -e 's/error_bound: 1e-3}/error_bound: 1e-3, codec_typo: 1}/' "$work/scenario.yaml" >"$work/bad.yaml"
out=$("$bin" simulate "$work/bad.yaml" 2>&1); code=$?
[[ $code -eq 2 && $out == *"bad.yaml:8:"*"unknown key 'codec_typo'"*"valid keys: profile, codec"* ]] || fail "bad key: exit $code, $out"
sed -e 's/codec: szp, error_bound: 1e-3/codec: szp/' "$work/scenario.yaml" >"$work/noeb.yaml"
out=$("$bin" simulate "$work/noeb.yaml" 2>&1); code=$?
[[ $code -eq 2 && $out == *"needs 'error_bound'"* ]] || fail "missing error_bound: exit $code, $out"

# --device cuda on this machine: without a GPU (or without CUDA in the build) a clear exit 2.
if [[ ! -e /dev/nvidia0 ]]; then
  out=$("$bin" calibrate --device cuda --quick -o "$work/gpu.yaml" 2>&1); code=$?
  [[ $code -eq 2 && $out == *"--device cuda: "*"use --device cpu"* ]] || fail "--device cuda without a GPU: exit $code, $out"
  [[ -e "$work/gpu.yaml" ]] && fail "--device cuda without a GPU wrote a profile"
fi
out=$("$bin" calibrate --device cpu --quick --emit-platform "$work/pl.yaml" -o "$work/q.yaml" 2>&1); code=$?
[[ $code -eq 2 && $out == *"--emit-platform needs --device cuda"* ]] || fail "--emit-platform with cpu: exit $code, $out"
# An empty --base-platform is an error (not "no base"), before any measurement.
out=$("$bin" calibrate --device cuda --quick --emit-platform "$work/pl.yaml" --base-platform "" -o "$work/q.yaml" 2>&1); code=$?
[[ $code -eq 2 && $out == *"empty platform; expected a shipped platform name or a .yaml file; shipped: a100-40gb"* ]] || fail "--base-platform '': exit $code, $out"
out=$("$bin" calibrate --device cuda --quick --emit-platform "$work/pl.yaml" --base-platform a100-41gb -o "$work/q.yaml" 2>&1); code=$?
[[ $code -eq 2 && $out == *"unknown platform 'a100-41gb'"* ]] || fail "--base-platform a100-41gb: exit $code, $out"
out=$("$bin" calibrate --device cpu --quick -o "$work/no/such/dir/q.yaml" 2>&1); code=$?
[[ $code -eq 2 && $out == *"does not exist"* ]] || fail "unwritable output: exit $code, $out"

sed -e 's/error_bound: 1e-3}/error_bound: 1e-3, error_bound_mode: absolute}/' "$work/scenario.yaml" >"$work/mode.yaml"
out=$("$bin" simulate "$work/mode.yaml" 2>&1); code=$?
[[ $code -eq 2 && $out == *"mode.yaml:8:"*"error_bound_mode' is 'absolute'; expected rel"*"or abs"* ]] || fail "bad error_bound_mode: exit $code, $out"

echo "calibrate cli: $failed failed"
[[ $failed -eq 0 ]]
