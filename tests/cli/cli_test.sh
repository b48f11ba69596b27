#!/usr/bin/env bash
# End-to-end checks of the comptrain command line: exit codes (0 ok, 1 internal or not
# implemented, 2 bad input) and that error messages name the problem.
# Usage: cli_test.sh PATH/TO/comptrain PATH/TO/tests/data
set -u
bin=$(realpath "$1")  # absolute: some checks run in another directory
data=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

# expect CODE PATTERN -- ARGS...: runs comptrain ARGS, checks the exit code and that the
# combined output matches the extended regular expression PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 3
  local out actual
  out=$("$bin" "$@" 2>&1)
  actual=$?
  if [[ $actual -eq $code ]] && grep -Eq -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: comptrain $* -> exit $actual (expected $code), output should match /$pattern/:"
    sed 's/^/    /' <<<"$out" | head -20
  fi
}

expect 0 '^comptrain [0-9]+\.[0-9]+\.[0-9]+$' -- --version
expect 0 'Subcommands:' -- --help
# The lists of commands give each one line (its summary; the details are in its own help): a
# listed line is "  NAME" and its summary within 100 columns, and the next line is the next
# command or the blank line that ends the list.
for words in "" trace; do
  # shellcheck disable=SC2086 # word splitting wanted
  listing=$("$bin" help $words | sed -n '/^Subcommands:$/,/^$/p' | sed '1d;$d')
  bad=$(awk 'length > 100 || !/^  [a-z][a-z0-9-]* +[^ ]/' <<<"$listing")
  if [[ -n "$listing" && -z "$bad" ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: 'comptrain help $words' should list each command on one line of at most 100 columns:"
    sed 's/^/    /' <<<"${bad:-(no list)}"
  fi
done
# The details stay in the command's own help.
expect 0 "scaling efficiency is against its best micro-batch" -- help plan
expect 0 "A sweep's shards \\(comptrain.sweep\\) join into" -- merge --help

# Usage errors: every one starts with the prefix, says what was expected, exits 2, and never
# shows CLI11's own wording.
# expect_usage PATTERN -- ARGS...: exit 2, one line "comptrain: error: ...; expected ..."
# matching PATTERN, and no CLI11 phrasing.
expect_usage() {
  local pattern=$1
  shift 2
  local out actual
  out=$("$bin" "$@" 2>&1)
  actual=$?
  if [[ $actual -eq 2 ]] && grep -Eq -- "^comptrain: error: .*; expected " <<<"$out" && grep -Eq -- "$pattern" <<<"$out" &&
    ! grep -Eq -- 'not expected|is required|not in range|Could not convert|required INT|subcommand' <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: comptrain $* -> exit $actual (expected 2), output should be a usage error matching /$pattern/:"
    sed 's/^/    /' <<<"$out" | head -20
  fi
}
expect_usage '^comptrain: error: no command given; expected one of: trace, simulate, compress, decompress, plan, merge, calibrate, validate, import, help$' --
expect_usage "^comptrain: error: unknown command 'not-a-command'; expected one of: trace, simulate, .*calibrate" -- not-a-command
expect_usage "unknown command 'trace nope'; expected one of: list, show, export, import" -- trace nope
expect_usage "unknown option '--bogus'; expected one of: .*--batch" -- simulate --bogus
expect_usage "unknown option '--bogus'; expected one of: --help, --version; or a command: trace" -- --bogus
expect_usage "unknown option '--layer' \\(did you mean '--layers'\\?\\); expected one of: .*--batch.*--layers, --hidden" -- trace show gpt --layer 3
# Typos: the closest command or option is suggested, before the list; nothing when none is close
# (--bogus above).
expect_usage "^comptrain: error: unknown command 'simulat' \\(did you mean 'simulate'\\?\\); expected one of: trace, simulate, " -- simulat
expect_usage "unknown command 'trace shwo' \\(did you mean 'show'\\?\\); expected one of: list, show" -- trace shwo
expect_usage "unknown command 'trace lsit' \\(did you mean 'list'\\?\\); expected one of: list, show" -- help trace lsit
expect_usage "unknown option '--max-bach' \\(did you mean '--max-batch'\\?\\); expected one of: .*--margin, --max-batch, " -- plan --max-bach 3
expect_usage "unknown option '--max-bach' \\(did you mean '--max-batch'\\?\\); expected one of: " -- plan --max-bach=3
expect_usage "unknown option '--verison' \\(did you mean '--version'\\?\\); expected one of: --help, --version; or a command: trace" -- --verison
expect_usage "unexpected argument 'two'; expected at most 1 argument \(scenario\)" -- simulate one two
expect_usage "unexpected argument 'two'; expected at most 1 argument" -- simulate one two three
expect_usage "missing option --output; expected --output" -- trace export resnet18
expect_usage "--batch needs a value; expected --batch INT" -- trace show resnet18 --batch
expect_usage "--precision: found 'fp8'; expected one of: fp32, amp-fp16, amp-bf16, fp16, bf16, mixed" -- trace show resnet18 --precision fp8
expect_usage "Run 'comptrain trace show --help' for more" -- trace show resnet18 --precision fp8

# Integers are read exactly: out of the type's range (2^63), fractions and words are errors
# naming the option, never clamped to 2^63 - 1 or truncated.
expect_usage '--batch: found 9223372036854775808, out of range; expected a positive integer' -- trace show resnet18 -b 9223372036854775808
# trace names: what a scenario's patterns are matched against, and what one matches.
expect 0 '^op     model\.layers\.0\.mlp\.gate_proj$' -- trace names "$data/../../scenarios/llama3-8b-hsdp-4x8xh100.yaml" --module model.layers.0.mlp --ops
expect 0 '^tensor model\.layers\.31\.add_1\.out$' -- trace names "$data/../../scenarios/llama3-8b-hsdp-4x8xh100.yaml" --name 'model.layers.*.add_1.out'
expect 0 '32 name\(s\) matched by' -- trace names "$data/../../scenarios/llama3-8b-hsdp-4x8xh100.yaml" --name 'model.layers.*.add_1.out' --tensors
expect 2 "^0 name\(s\) matched by 'model\.layerz'$" -- trace names "$data/../../scenarios/llama3-8b-hsdp-4x8xh100.yaml" --module model.layerz
# A pipeline scenario's names are its stages', the send and receive ops included.
expect 0 '^tensor recv_forward\.out$' -- trace names "$data/../../scenarios/llama2-70b-tp8-pp4-4xh100.yaml" --name recv_forward.out
expect_usage "--module: pattern 'layers\.\[3-1\]': the range '\[3-1\]' is empty" -- trace names gpt2 --module 'layers.[3-1]'
expect_usage '--batch: found 9223372036854775808, out of range' -- simulate -b 9223372036854775808
expect_usage '--max-batch: found 9223372036854775808, out of range' -- plan --max-batch 9223372036854775808
expect_usage "--batch: found '1.5', not an integer" -- trace show resnet18 -b 1.5
expect_usage "--batch: found '1.5', not an integer" -- simulate -b 1.5
expect_usage "--layers: found 'many', not an integer" -- trace show gpt --layers many
expect_usage "--jobs: found 0, out of range; expected a positive integer" -- plan -j 0
expect_usage "--largest: found -1, out of range; expected a non-negative integer" -- trace show resnet18 --largest -1
expect_usage "--batch: found 0, out of range" -- trace import x.json -o y.json -b 0
# Range errors print their bounds as written, not as 300-digit doubles.
expect_usage '--margin: found 1.5, out of range; expected a number from 0 to 0.999999$' -- plan --margin 1.5
for args in "trace show -b 0" "simulate -b 0" "plan --max-batch 0" "plan --margin 2"; do
  # shellcheck disable=SC2086 # word splitting wanted
  if "$bin" $args 2>&1 | grep -Eq '[0-9]{40}'; then
    failed=$((failed + 1)); echo "FAIL: comptrain $args prints a 40-digit number"
  else
    passed=$((passed + 1))
  fi
done
# 2^63 - 1 itself is in range: accepted by the option (then too large for the zoo, an input error).
expect 2 '^comptrain: error: ' -- trace show resnet18 -b 9223372036854775807
"$bin" trace show resnet18 -b 9223372036854775807 2>&1 | grep -q 'found 9223372036854775807' &&
  { failed=$((failed + 1)); echo "FAIL: -b 2^63-1 rejected by the option"; } || passed=$((passed + 1))

# help CMD prints the command's help, exactly what CMD --help prints.
expect 0 '^Usage: comptrain \[OPTIONS\] SUBCOMMAND' -- help
expect 0 '^Usage: comptrain simulate \[OPTIONS\]' -- help simulate
expect 0 '^Usage: comptrain trace show \[OPTIONS\]' -- help trace show
expect_usage "unknown command 'nope'; expected one of: trace" -- help nope
expect_usage "unknown command 'trace nope'; expected one of: list, show" -- help trace nope
for cmd in "" simulate "trace show" "trace import" calibrate; do
  # shellcheck disable=SC2086 # word splitting wanted
  if cmp -s <("$bin" help $cmd 2>&1) <("$bin" $cmd --help 2>&1); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL: 'comptrain help $cmd' differs from 'comptrain $cmd --help'"
  fi
done

# --version after any subcommand: the same line as after comptrain itself.
version=$("$bin" --version)
for cmd in simulate "trace" "trace show" "trace import" plan merge calibrate compress decompress; do
  # shellcheck disable=SC2086 # word splitting wanted
  out=$("$bin" $cmd --version 2>&1)
  code=$?
  if [[ $code -eq 0 && "$out" == "$version" ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL: comptrain $cmd --version -> exit $code, '$out' (expected '$version')"
  fi
done

expect 0 'resnet50' -- trace list
expect 0 'parameters +11,689,512' -- trace show resnet18 --batch 2
expect 0 'resnet50 · batch 32 · precision fp32 · optimizer momentum' -- trace show
expect 0 '"parameters": 25557032' -- trace show resnet50 --json
expect 0 'gpt · batch 1' -- trace show gpt --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 128
expect 2 'unknown zoo model|resnet51' -- trace show resnet51
expect_usage '--batch: found 0, out of range; expected a positive integer' -- trace show resnet18 --batch 0

# Export, read back, rescale.
expect 0 'wrote' -- trace export alexnet --batch 4 -o "$work/alexnet.json"
expect 0 'alexnet · batch 4' -- trace show "$work/alexnet.json"
expect 0 'alexnet · batch 8' -- trace show "$work/alexnet.json" --batch 8
expect 2 'only --batch' -- trace show "$work/alexnet.json" --precision mixed
expect 2 "cannot write .*$work/missing/x.json" -- trace export alexnet -o "$work/missing/x.json"

# -o - writes to standard output: the same document as the file, and no file called "-".
(cd "$work" && "$bin" trace export alexnet --batch 4 -o - >"$work/stdout.json" 2>"$work/stderr.txt")
code=$?
if [[ $code -eq 0 ]] && cmp -s "$work/stdout.json" "$work/alexnet.json" && [[ ! -e "$work/-" ]] &&
  grep -q 'wrote standard output' "$work/stderr.txt"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL: trace export -o - (exit $code) should print the trace file's content on stdout"
fi
(cd "$work" && "$bin" trace import "$data/import/chakra.json" -o - >"$work/import_stdout.json" 2>/dev/null)
"$bin" trace import "$data/import/chakra.json" -o "$work/import_file.json" 2>/dev/null
if [[ ! -e "$work/-" ]] && [[ -s "$work/import_stdout.json" ]] && cmp -s "$work/import_stdout.json" "$work/import_file.json"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL: trace import -o - should write the trace file's content to stdout"
fi
# compress and decompress: "-" is standard output too (binary), byte for byte the file's content.
awk 'BEGIN { for (i = 0; i < 1024; i++) printf "%c%c%c%c", 0, i % 256, 128, 63 }' >"$work/x.f32"
"$bin" compress --codec szp --eb 1e-3 --rel "$work/x.f32" "$work/x.szp"
(cd "$work" && "$bin" compress --codec szp --eb 1e-3 --rel "$work/x.f32" - >"$work/x_stdout.szp")
"$bin" decompress "$work/x.szp" "$work/x_back.f32"
(cd "$work" && "$bin" decompress "$work/x.szp" - >"$work/x_back_stdout.f32")
if [[ -s "$work/x.szp" && ! -e "$work/-" ]] && cmp -s "$work/x.szp" "$work/x_stdout.szp" && cmp -s "$work/x_back.f32" "$work/x_back_stdout.f32"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL: compress/decompress to - should write the stream/array to stdout"
fi
expect 2 '^comptrain: error: --stats prints to standard output; expected an output file' -- compress --codec szp --eb 1e-3 --stats "$work/x.f32" -
# Unsigned options: out of range or fractional are errors too, never wrapped or clamped.
expect_usage "--threads: found 18446744073709551616, out of range; expected an integer from 0 to 256" -- decompress --threads 18446744073709551616 "$work/x.szp" "$work/y.f32"
expect_usage "--bits: found '1.5', not an integer; expected an integer from 1 to 8" -- compress --codec quant --bits 1.5 "$work/x.f32" "$work/y.q"

# Broken trace files: truncated, hand-broken, dangling reference.
head -c 2000 "$work/alexnet.json" >"$work/truncated.json"
expect 2 'truncated.json: line [0-9]+, column [0-9]+' -- trace show "$work/truncated.json"
sed '0,/"batch_size": 4/s//"batch_size": "four"/' "$work/alexnet.json" >"$work/wrongtype.json"
expect 2 'wrongtype.json: /batch_size' -- trace show "$work/wrongtype.json"
sed '0,/"inputs": \[/s//"inputs": [987654, /' "$work/alexnet.json" >"$work/dangling.json"
expect 2 'dangling.json: /ops/0/inputs/0.*987654' -- trace show "$work/dangling.json"
expect 2 'cannot read' -- trace show "$work/nonexistent.json"

# Per-tensor value features (version 2): read; malformed ones name their JSON path.
values=$2/traces/tiny_values.json
expect 0 'tiny-mlp · batch 2' -- trace show "$values"
sed 's/"zero_fraction": 0.5,/"zero_fraction": 1.5,/' "$values" >"$work/range.json"
expect 2 'range.json: /tensors/3/values/zero_fraction: found 1.5; expected a fraction in \[0, 1\]' -- trace show "$work/range.json"
sed 's/"zero_fraction": 0.5,/"zero_fractoin": 0.5,/' "$values" >"$work/key.json"
expect 2 'key.json: /tensors/3/values/zero_fractoin: unknown field' -- trace show "$work/key.json"
sed 's/"spread": 0.25/"spread": "wide"/' "$values" >"$work/type.json"
expect 2 'type.json: /tensors/0/values/spread: found the string "wide"' -- trace show "$work/type.json"

# Scenarios.
printf 'model:\n  zoo: resnet18\ntraining:\n  batch_size: 4\n' >"$work/ok.yaml"
expect 0 'resnet18 · batch 4' -- trace show "$work/ok.yaml"
printf 'model:\n  zoo: resnet18\ntraining:\n  batchsize: 4\n' >"$work/typo.yaml"
expect 2 'typo.yaml:4:3: unknown key .batchsize.' -- trace show "$work/typo.yaml"
printf 'model:\n  zoo: resnet18\ntraining:\n  precison: fp16\n' >"$work/typo2.yaml"
expect 2 "^comptrain: error: .*typo2.yaml:4:3: unknown key 'precison' in training; did you mean 'precision'\\? valid keys: batch_size, precision, " -- simulate "$work/typo2.yaml"
printf 'model:\n  zoo: resnet18\ntraining:\n  learning_rate: 0.1\n' >"$work/typo3.yaml"
expect 2 "typo3.yaml:4:3: unknown key 'learning_rate' in training; valid keys: batch_size, " -- simulate "$work/typo3.yaml"

# Simulation: the default scenario fits; a batch that does not fit says so; output files.
expect 0 'FITS' -- simulate
expect 0 'resnet50-a100-baseline' -- simulate --json
expect 0 'DOES NOT FIT' -- simulate --batch 512
expect 0 'iteration time' -- simulate --platform v100-32gb --memory-csv "$work/memory.csv" --timeline "$work/timeline.json"
head -1 "$work/memory.csv" | grep -q '^time_s,' && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: memory CSV header"; }
grep -q '"traceEvents"' "$work/timeline.json" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: Perfetto trace"; }
# Memory as PyTorch holds it: the four peaks, the out-of-memory PyTorch would raise, the metric.
expect 0 'device .*nvidia-smi: reserved \+ CUDA context 381\.47 MiB' -- simulate
expect 0 'PyTorch would run out of GPU memory in the first iteration' -- simulate --batch 512
expect 0 'Memory     device: reserved \+ CUDA context' -- plan -q --memory-metric device --max-batch 8 -j 1
expect_usage "--memory-metric: found 'peak'; expected one of: reserved, allocated, exact, device" -- plan --memory-metric peak
printf 'model: {zoo: bert-base, seq_len: 128, attention: eager, head: sequence-classification}\ntraining: {batch_size: 2, precision: amp-fp16, optimizer: adamw}\nframework: {pytorch: "1.10", cuda_context: 1343 MiB}\nplatform: v100-16gb\n' >"$work/framework.yaml"
expect 0 'PyTorch 1\.10; gradients zeroed and kept' -- simulate "$work/framework.yaml"
printf 'model: {zoo: resnet18}\nframework: {cuda_context: 20 GiB}\nplatform: v100-16gb\n' >"$work/bigcontext.yaml"
expect 2 'bigcontext.yaml: framework.cuda_context .* leaves nothing' -- simulate "$work/bigcontext.yaml"
printf 'model: {zoo: resnet18}\nframework: {zero_grad: never}\nplatform: v100-16gb\n' >"$work/zerograd.yaml"
expect 2 "zerograd.yaml:2:24: 'framework.zero_grad' is 'never'; expected set_to_none" -- simulate "$work/zerograd.yaml"
printf 'model:\n  zoo: resnet18\n' >"$work/noplatform.yaml"
expect 2 "has no 'platform'" -- simulate "$work/noplatform.yaml"
printf 'model:\n  zoo: resnet18\nplatform: a100-40gb\nstrategy:\n  rules:\n    - offload: {lookahead: -1}\n' >"$work/badrule.yaml"
expect 2 'badrule.yaml:6:' -- simulate "$work/badrule.yaml"
printf 'model:\n  zoo: resnet18\nplatform: a100-40gb\nstrategy: offload\n' >"$work/offload.yaml"
expect 0 'offload copies' -- simulate "$work/offload.yaml"
expect 2 'a100-41gb' -- simulate --platform a100-41gb

# Every shipped scenario simulates.
for scenario in "$2"/../../scenarios/*.yaml; do
  expect 0 'FITS|DOES NOT FIT' -- simulate "$scenario"
done

# The planner on a small model with a low search ceiling (fast): table, JSON, CSV, errors,
# sweeps, shards and their merge.
printf 'model: {zoo: resnet18}\nplatform: a100-40gb\nplan: {max_batch: 16, strategies: [baseline, recompute]}\n' >"$work/plan.yaml"
expect 0 'baseline +>= 16' -- plan -q "$work/plan.yaml"
expect 0 '"max_batch": 16' -- plan -q --json -j 1 "$work/plan.yaml"
expect 0 'accum steps' -- plan -q --target-global-batch 100 --max-batch 8 --csv "$work/plan.csv" "$work/plan.yaml"
head -1 "$work/plan.csv" | grep -q '^variant,scenario,platform,strategy,batch,fits' && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: plan CSV header"; }
expect 2 'margin' -- plan --margin 1.5 "$work/plan.yaml"
# plan --hybrid: the table, the exported strategy (a scenario's strategy section that simulates), errors.
expect 0 'Hybrid plan: per saved activation' -- plan -q --hybrid --time-limit 0.2 --export-strategy "$work/hybrid-strategy.yaml" "$work/plan.yaml"
{ printf 'model: {zoo: resnet18}\nplatform: a100-40gb\ntraining: {batch_size: 16}\nstrategy:\n'; sed 's/^/  /' "$work/hybrid-strategy.yaml"; } >"$work/hybrid-run.yaml"
expect 0 'FITS' -- simulate "$work/hybrid-run.yaml"
expect 0 '"schema"' -- plan -q --hybrid --json --time-limit 0.2 "$work/plan.yaml"
expect 2 'apply to --hybrid' -- plan --time-limit 1 "$work/plan.yaml"
expect 2 'has no .sweep. section and no cluster search \(plan.gpus, .*\) to split' -- plan --shard 0/2 "$work/plan.yaml"
# A layout search's shards (plan --shard without a sweep) and their merge: the unsharded table,
# and JSON with --json; what does not belong together is refused.
printf 'model: {zoo: gpt, layers: 2, hidden: 128, heads: 4, seq_len: 128, vocab: 512, attention: flash}\ntraining: {batch_size: 1, precision: mixed, optimizer: adamw}\nplatform: dgx-h100-superpod\nparallelism: {nodes: 1, gpus_per_node: 4}\nplan: {target_global_batch: 8, tensor: [1, 2], pipeline: [1, 2], micro_batches: [2], strategies: [baseline]}\n' >"$work/layouts.yaml"
"$bin" plan -q -j 1 "$work/layouts.yaml" >"$work/layouts-whole.txt"
"$bin" plan -q -j 1 --json "$work/layouts.yaml" >"$work/layouts-whole.json"
expect 0 'wrote' -- plan -q -j 1 --shard 0/3 -o "$work/l0.json" "$work/layouts.yaml"
expect 0 'wrote' -- plan -q -j 1 --shard 1/3 -o "$work/l1.json" "$work/layouts.yaml"
expect 0 'wrote' -- plan -q -j 1 --shard 2/3 -o "$work/l2.json" "$work/layouts.yaml"
"$bin" merge "$work/l2.json" "$work/l0.json" "$work/l1.json" >"$work/layouts-merged.txt" && cmp -s "$work/layouts-whole.txt" "$work/layouts-merged.txt" &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: the merged layout shards' table differs from the unsharded plan's"; }
"$bin" merge --json "$work/l2.json" "$work/l0.json" "$work/l1.json" >"$work/layouts-merged.json" && cmp -s "$work/layouts-whole.json" "$work/layouts-merged.json" &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: the merged layout shards' JSON differs from the unsharded plan --json"; }
expect 2 'missing 1 of 3 shards \(0-based\): 2' -- merge "$work/l0.json" "$work/l1.json"
expect 2 'shard 1/3 given twice' -- merge "$work/l0.json" "$work/l1.json" "$work/l1.json" "$work/l2.json"
expect 0 'wrote' -- plan -q -j 1 --margin 0.2 --shard 1/3 -o "$work/l1-margin.json" "$work/layouts.yaml"
# A layout search over virtual stages and context degrees, with a strategy compressing on the first
# stage only: the table names each layout's degrees, and its shards merge to the unsharded plan.
printf 'model: {zoo: gpt, layers: 4, hidden: 128, heads: 4, seq_len: 128, vocab: 512, attention: flash}\ntraining: {batch_size: 1, precision: mixed, optimizer: adamw}\nplatform: dgx-h100-superpod\nparallelism: {nodes: 1, gpus_per_node: 4}\nplan:\n  target_global_batch: 8\n  tensor: [1]\n  pipeline: [1, 2]\n  virtual_stages: [1, 2]\n  context: [1, 2]\n  micro_batches: [2]\n  strategies:\n    - baseline\n    - {name: compress-first-1, first_stages: 1, rules: [{select: {min_bytes: 64 KiB}, compress: {ratio: 4, compress_bandwidth: 700 GB/s, decompress_bandwidth: 1100 GB/s, latency: 20 us, error_bound: 1e-2}}]}\n' >"$work/vc-layouts.yaml"
"$bin" plan -q -j 1 "$work/vc-layouts.yaml" >"$work/vc-whole.txt"
grep -q 'TP 1 x PP 2 x VP 2 x CP 2 x DP 1, DDP .*compress-first-1' "$work/vc-whole.txt" && grep -q "'compress-first-1' (first_stages 1) is planned on the layouts of at least 2 pipeline stages only" "$work/vc-whole.txt" &&
  grep -q 'x 6 layouts simulated' "$work/vc-whole.txt" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: the V x C layout plan's table:"; sed 's/^/    /' "$work/vc-whole.txt" | head -30; }
expect 0 'wrote' -- plan -q -j 1 --shard 0/2 -o "$work/vc0.json" "$work/vc-layouts.yaml"
expect 0 'wrote' -- plan -q -j 1 --shard 1/2 -o "$work/vc1.json" "$work/vc-layouts.yaml"
"$bin" merge "$work/vc1.json" "$work/vc0.json" >"$work/vc-merged.txt" && cmp -s "$work/vc-whole.txt" "$work/vc-merged.txt" &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: the merged V x C layout shards' table differs from the unsharded plan's"; }
# Bad values at their lines: first_stages above the pipeline or without one, plan.expert on a dense model.
printf 'model: {zoo: gpt, layers: 4, hidden: 128, heads: 4, seq_len: 128, vocab: 512}\ntraining: {batch_size: 1, gradient_accumulation_steps: 2}\nplatform: dgx-h100-superpod\nparallelism: {gpus_per_node: 2, pipeline: 2}\nstrategy:\n  first_stages: 3\n  rules: [{select: {min_bytes: 1 MiB}, offload: {}}]\n' >"$work/first-stages.yaml"
expect 2 'first-stages.yaml:6:17: strategy.first_stages: first_stages is 3; the pipeline has 2 stages; expected at most 2' -- simulate "$work/first-stages.yaml"
sed 's/pipeline: 2/pipeline: 1/' "$work/first-stages.yaml" >"$work/first-stages-nopp.yaml"
expect 2 'first-stages-nopp.yaml:6:17: strategy.first_stages: first_stages is 3; the run has no pipeline' -- simulate "$work/first-stages-nopp.yaml"
printf 'model: {zoo: gpt, layers: 4, hidden: 128, heads: 4, seq_len: 128, vocab: 512}\nplatform: dgx-h100-superpod\nparallelism: {gpus_per_node: 4}\nplan: {target_global_batch: 8, expert: [2], strategies: [baseline]}\n' >"$work/dense-expert.yaml"
expect 2 'dense-expert.yaml:4:40: plan.expert: searches expert-parallel degrees, but the model is dense' -- plan -q "$work/dense-expert.yaml"
expect 2 'l1-margin.json: from another run than .*l0.json' -- merge "$work/l0.json" "$work/l1-margin.json" "$work/l2.json"
printf 'model: {zoo: resnet18}\nplatform: a100-40gb\nplan: {max_batch: 4}\nsweep:\n  training.batch_size: [1, 2, 3]\n  platform: [a100-40gb, v100-32gb]\n' >"$work/sweep.yaml"
expect 0 'variant 5 of 6: training.batch_size=3, platform=v100-32gb' -- plan -q "$work/sweep.yaml"
expect 0 'platform=v100-32gb' -- simulate -q "$work/sweep.yaml"
"$bin" plan -q --json "$work/sweep.yaml" >"$work/whole.json"
expect 0 'wrote' -- plan -q --shard 0/2 -o "$work/s0.json" "$work/sweep.yaml"
expect 0 'wrote' -- plan -q --shard 1/2 -o "$work/s1.json" "$work/sweep.yaml"
expect 0 'wrote' -- merge "$work/s1.json" "$work/s0.json" -o "$work/merged.json"
cmp -s "$work/whole.json" "$work/merged.json" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: merged shards differ from the unsharded plan"; }
(cd "$work" && "$bin" merge "$work/s1.json" "$work/s0.json" -o - >"$work/merged_stdout.json") && [[ ! -e "$work/-" ]] && cmp -s "$work/whole.json" "$work/merged_stdout.json" &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: merge -o - should print the merged document on stdout"; }
expect 2 'missing [0-9]+ of [0-9]+ variants' -- merge "$work/s0.json"
expect 2 'more than once' -- merge "$work/s0.json" "$work/s1.json" "$work/s0.json"
"$bin" simulate -q --shard 0/2 "$work/sweep.yaml" >"$work/sim0.json"
expect 2 'another sweep' -- merge "$work/s0.json" "$work/sim0.json"
printf 'model: {zoo: resnet18}\nplatform: a100-40gb\nsweep:\n  training.batchsize: [1]\n' >"$work/badsweep.yaml"
expect 2 'badsweep.yaml:4:3: .*unknown key .batchsize.' -- plan "$work/badsweep.yaml"
printf 'model: {zoo: resnet18}\nplatform: a100-40gb\nsweep:\n  training.batch_size: {from: 1, to: 4, stpe: 1}\n' >"$work/badrange.yaml"
expect 2 "badrange.yaml:4:41: unknown key 'stpe' in the range of sweep key 'training.batch_size'; did you mean 'step'\\? valid keys: from, to, step" -- plan "$work/badrange.yaml"

# calibrate: usage errors (the measurements themselves: tests/calibrate/calibrate_cli_test.sh).
expect_usage 'missing option --output; expected --output' -- calibrate
expect_usage '--threads: found -2, out of range; expected an integer from 0 to 256' -- calibrate --threads -2 -o "$work/p.yaml"
expect_usage "--device: found 'tpu'; expected one of: cpu, cuda" -- calibrate --device tpu -o "$work/p.yaml"
expect 2 'both documents to standard output' -- calibrate --device cuda -o - --emit-platform -
[[ -e /dev/nvidia0 ]] || expect 2 'no GPU is visible|built without CUDA' -- calibrate --device cuda -o "$work/p.yaml"
expect 2 'unknown codec|expected one of' -- calibrate --codecs nope -o "$work/p.yaml"
expect 0 'memory-csv' -- simulate --help

# The run layer's results and guards (issue: one run layer).
scenarios=$(cd "$(dirname "$0")/../../scenarios" && pwd)
expect 2 "empty platform; expected a shipped platform name or a .yaml file" -- simulate --platform ""
expect 0 "hint: .*'offload: \{synchronous: true\}'" -- simulate "$scenarios/resnet50-offload.yaml" --batch 1024
"$bin" trace import "$2/import/memory_snapshot.json" -o "$work/snapshot.json" 2>/dev/null
printf 'model: {trace: %s}\nplatform: a100-40gb\n' "$work/snapshot.json" >"$work/snapshot.yaml"
expect 0 "warning: .*snapshot.yaml: the trace has no GPU work" -- simulate "$work/snapshot.yaml"
printf 'model: {zoo: resnet18}\ntraining: {batch_size: 4}\nplatform: a100-40gb\nstrategy: {name: tight, rules: [{recompute: {mode: budget, budget: 1 KiB}}]}\n' >"$work/budget.yaml"
expect 0 "DOES NOT APPLY at batch 4: strategy rule 0: recompute budget of 1024 bytes" -- simulate "$work/budget.yaml"
expect 0 '"not_applicable": "strategy rule 0: recompute budget' -- simulate "$work/budget.yaml" --json
expect 0 '"schema": \{\s*$' -- simulate --json
printf 'model: {zoo: resnet18}\nplatform: a100-40gb\nplan: {strategies: [baseline, {name: bad, rules: [{recompute: {mode: every_k, k: 0}}]}]}\n' >"$work/bad-plan.yaml"
expect 2 "bad-plan.yaml:3:[0-9]+: 'plan.strategies\[1\].rules\[0\].recompute.k' is '0'" -- plan "$work/bad-plan.yaml" -q
out=$("$bin" plan "$work/bad-plan.yaml" -q 2>&1)
if [[ $(grep -c 'error' <<<"$out") -eq 1 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: a malformed plan strategy should be one error, got: $out"; fi
expect 0 'Verdict: .* runs the largest batch' -- plan "$work/budget.yaml" -q --max-batch 64
expect 0 'DOES NOT APPLY|does not apply' -- plan "$work/budget.yaml" -q --max-batch 64

printf 'model: {zoo: resnet18}\nplatform: a100-40gb\nplan: {memory_metric: peak}\n' >"$work/metric.yaml"
expect 2 "metric.yaml:3:23: 'plan.memory_metric' is 'peak'; expected reserved" -- plan "$work/metric.yaml" -q
expect 2 "--memory-metric: found 'x'; expected one of: reserved, allocated, exact" -- plan --memory-metric x
expect 0 'Memory     exact: ' -- plan "$work/budget.yaml" -q --max-batch 16 --memory-metric exact
expect 0 'Memory     reserved: ' -- plan "$work/budget.yaml" -q --max-batch 16

# A model the workers cannot build: one error, the same for any -j.
printf 'model: {zoo: gpt, layers: 1, hidden: 64, heads: 5, seq_len: 16, vocab: 64}\nplatform: a100-40gb\n' >"$work/heads.yaml"
expect 2 "heads.yaml:1:[0-9]+: model: heads: 5 heads do not divide hidden size 64" -- plan "$work/heads.yaml" -q -j 2

# Clusters (issue 15 item 6): a plan of a parallelism section, a cluster search, their errors.
printf 'model: {zoo: gpt2, layers: 2, seq_len: 256}\ntraining: {precision: mixed}\nplatform: a100-80gb\nparallelism: {gpus_per_node: 4}\nplan: {max_batch: 4, strategies: [baseline]}\n' >"$work/dp.yaml"
expect 0 'batches are per-GPU micro-batches; samples/s are global' -- plan -q -j 2 "$work/dp.yaml"
expect 2 "dp.yaml: plan: target global batch 10 is not a multiple of the 4 GPUs" -- plan -q --target-global-batch 10 "$work/dp.yaml"
printf 'model: {zoo: gpt2, layers: 2, seq_len: 256}\ntraining: {precision: mixed}\nplatform: a100-80gb\nplan: {gpus: [2, 4], zero_stages: [0, 3], target_global_batch: 16, strategies: [baseline]}\n' >"$work/search.yaml"
expect 0 'Fastest: [0-9]+ GPUs \(1 node x [24]\), (DDP|ZeRO-3), optimizer on GPU, baseline' -- plan -q -j 2 "$work/search.yaml"
expect 0 '"cluster_search": \{' -- plan -q -j 2 --json "$work/search.yaml"
expect 2 "^comptrain: error: --plots: .*cluster search" -- plan -q --plots "$work/plots" "$work/search.yaml"
printf 'model: {zoo: gpt2}\nplatform: a100-80gb\nplan:\n  gpus: [8, 12]\n' >"$work/bad-gpus.yaml"
expect 2 "bad-gpus.yaml:4:13: 'plan.gpus' has 12 GPUs, which do not fill whole nodes of 8" -- plan -q "$work/bad-gpus.yaml"
printf 'model: {zoo: gpt2}\nplatform: a100-80gb\nplan: {zero_stages: [0, 5]}\n' >"$work/bad-stages.yaml"
expect 2 "bad-stages.yaml:3:25: 'plan.zero_stages\[1\]' is '5'; expected an integer from 0 to 3" -- plan -q "$work/bad-stages.yaml"
printf 'model: {zoo: gpt2, layers: 2, seq_len: 256}\ntraining: {precision: mixed}\nplatform: a100-80gb\nparallelism: {gpus_per_node: 2, zero: {stage: 3}}\nplan: {max_batch: 2, strategies: [baseline], offload_optimizer: [cpu, deep_optimizer_states], prefetch_optimizer_gaps: [2]}\n' >"$work/offload.yaml"
expect 0 'ZeRO-3  DOS k=2 ' -- plan -q -j 2 "$work/offload.yaml"
printf 'model: {zoo: gpt2}\nplatform: a100-80gb\nplan: {offload_optimizer: [nvme]}\n' >"$work/bad-offload.yaml"
expect 2 "bad-offload.yaml:3:28: 'plan.offload_optimizer\[0\]' is 'nvme'; expected none" -- plan -q "$work/bad-offload.yaml"

# training.loss, the optimizers outside torch.optim and optimizer_in_backward (traces/zoo/README.md).
printf 'model: {zoo: gpt, layers: 1, hidden: 64, heads: 4, seq_len: 16, vocab: 1000}\ntraining: {batch_size: 2, precision: bf16, optimizer: adamw8bit, loss: {kind: fused_linear_cross_entropy}}\n' >"$work/liger.yaml"
expect 0 'gpt · batch 2' -- trace show "$work/liger.yaml"
printf 'model: {zoo: gpt, seq_len: 16}\ntraining: {loss: {kind: fused_linear}}\n' >"$work/bad-loss.yaml"
expect 2 "bad-loss.yaml:2:25: unknown loss kind 'fused_linear' in 'training.loss.kind'; .*expected one of: cross_entropy, fused_linear_cross_entropy, chunked, fused_cross_entropy" -- trace show "$work/bad-loss.yaml"
printf 'model: {zoo: gpt, seq_len: 16}\ntraining: {loss: {kind: cross_entropy, chunks: 4}}\n' >"$work/bad-chunks.yaml"
expect 2 "bad-chunks.yaml:2:48: 'training.loss.chunks' applies to kind chunked" -- trace show "$work/bad-chunks.yaml"
printf 'model: {zoo: gpt, seq_len: 16}\ntraining: {loss: {kind: cross_entropy, upcast: true, compiled: true}}\n' >"$work/compiled-upcast.yaml"
expect 2 "compiled-upcast.yaml:2:64: 'training.loss.compiled' upcasts the logits in its kernels; expected no 'training.loss.upcast' with it" -- trace show "$work/compiled-upcast.yaml"
printf 'model: {zoo: gpt, seq_len: 16}\ntraining: {loss: {kind: chunked, compiled: true}}\n' >"$work/compiled-chunked.yaml"
expect 2 "compiled-chunked.yaml:2:44: 'training.loss.compiled' applies to kind cross_entropy, not chunked" -- trace show "$work/compiled-chunked.yaml"
printf 'model: {zoo: gpt, seq_len: 16}\ntraining: {loss: {kind: chunked, chunks: 17}}\n' >"$work/many-chunks.yaml"
expect 2 "loss.chunks: 17 chunks of a 16-token sequence; expected 1 to seq_len" -- trace show "$work/many-chunks.yaml"
printf 'model: {zoo: bert-base, seq_len: 16}\ntraining: {loss: {kind: chunked}}\n' >"$work/bert-loss.yaml"
expect 2 "loss: kind chunked applies to the language models" -- trace show "$work/bert-loss.yaml"
printf 'model: {zoo: gpt, seq_len: 16}\ntraining: {optimizer: adafactor, optimizer_impl: fused}\n' >"$work/adafactor-impl.yaml"
expect 2 "adafactor-impl.yaml:2:50: 'training.optimizer_impl' applies to torch.optim's" -- trace show "$work/adafactor-impl.yaml"
printf 'model: {zoo: gpt, seq_len: 16}\ntraining: {optimizer_in_backward: true, gradient_accumulation_steps: 2}\n' >"$work/inbwd-accum.yaml"
expect 2 "inbwd-accum.yaml:2:35: 'training.optimizer_in_backward' with gradient_accumulation_steps 2" -- simulate "$work/inbwd-accum.yaml"
printf 'model: {hf_config: {model_type: llama, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 1000, max_position_embeddings: 64}, seq_len: 16, implementation: megatron}\ntraining: {precision: bf16, optimizer_in_backward: true}\n' >"$work/inbwd-megatron.yaml"
# Megatron's layers with a tied embedding over two stages: both ends exchange fp32 main_grad.
printf 'model: {hf_config: {model_type: llama, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, vocab_size: 1000, max_position_embeddings: 64, tie_word_embeddings: true}, seq_len: 16, implementation: megatron}\ntraining: {precision: bf16}\nplatform: dgx-a100-superpod\nparallelism: {gpus_per_node: 2, pipeline: 2}\n' >"$work/tied-pp.yaml"
expect 0 '^FITS' -- simulate "$work/tied-pp.yaml"
expect 2 "inbwd-megatron.yaml:2:52: 'training.optimizer_in_backward' with model.implementation megatron: Megatron-LM steps its optimizer after the backward pass" -- simulate "$work/inbwd-megatron.yaml"
printf 'model: {zoo: gpt, seq_len: 16}\ntraining: {optimizer_in_backward: yes-please}\n' >"$work/inbwd-bad.yaml"
expect 2 "inbwd-bad.yaml:2:35: .*training.optimizer_in_backward" -- simulate "$work/inbwd-bad.yaml"
printf 'model: {zoo: gpt, layers: 2, hidden: 64, heads: 4, seq_len: 16, vocab: 1000}\ntraining: {batch_size: 2, precision: bf16, optimizer: adamw, optimizer_impl: fused, optimizer_in_backward: true}\nplatform: a100-80gb\n' >"$work/inbwd.yaml"
expect 0 'peak' -- simulate "$work/inbwd.yaml"
printf 'model: {zoo: gpt2, layers: 2, seq_len: 256}\ntraining: {precision: mixed, optimizer: adafactor}\nplatform: a100-80gb\nparallelism: {gpus_per_node: 2, zero: {stage: 3, offload_optimizer: {device: cpu}}}\n' >"$work/offload-adafactor.yaml"
expect 2 "offload-adafactor.yaml:2:41: 'training.optimizer' is adafactor with an optimizer offload" -- simulate "$work/offload-adafactor.yaml"

# comptrain import: a Megatron-LM launch line and a torchtitan job as scenarios, read back by trace show
# (one tensor-parallel rank of 8: the 70B's 68,989,231,104 parameters with the padded vocabulary, / 8 but the norms).
expect 0 'imported .*llama2-70b-tp8-pp4.sh \(megatron\)' -- import "$data/import/llama2-70b-tp8-pp4.sh" --platform dgx-h100-superpod -o "$work/imported-70b.yaml"
expect 0 'parameters +8,624,807,936' -- trace show "$work/imported-70b.yaml"
expect 0 'imported .*llama3-8b-torchtitan.toml \(torchtitan\)' -- import "$data/import/llama3-8b-torchtitan.toml" --platform dgx-h100-superpod -o "$work/imported-8b.yaml"
expect 0 'peak' -- simulate "$work/imported-8b.yaml"
printf -- '--num-layers 2 --hidden-size 64\n--num-attention-heads x\n' >"$work/bad-args.sh"
expect 2 "bad-args.sh:2: --num-attention-heads is 'x'; expected an integer" -- import "$work/bad-args.sh" --platform h100-80gb -o "$work/never.yaml"
# Megatron-LM's recompute flags imported as the strategy's settings, and the layout planner under each granularity.
printf -- '--nproc-per-node 2 --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256 --vocab-size 1024 --bf16\n--pipeline-model-parallel-size 2 --global-batch-size 4 --recompute-granularity full --recompute-method block --recompute-num-layers 1\n' >"$work/recompute.sh"
expect 0 'imported .*recompute.sh \(megatron\)' -- import "$work/recompute.sh" --platform dgx-a100-superpod -o "$work/recompute.yaml"
expect 0 'Per stage' -- simulate "$work/recompute.yaml"
# Its Perfetto trace: one process per stage, named after its layers, each with its slices.
expect 0 'Per stage' -- simulate "$work/recompute.yaml" --timeline "$work/pp-timeline.json"
for stage in '"pid":1,"tid":0,"args":{"name":"stage 0 (layers 0-1)' '"pid":2,"tid":0,"args":{"name":"stage 1 (layers 2-3)' '"ph":"X","ts":[0-9.]*,"dur":[0-9.]*,"pid":2,"tid":1'; do
  grep -q "$stage" "$work/pp-timeline.json" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: pipeline Perfetto trace lacks $stage"; }
done
printf 'model: {zoo: gpt, layers: 4, hidden: 256, heads: 4, seq_len: 256, vocab: 1024}\nplatform: dgx-a100-superpod\nparallelism: {gpus_per_node: 2}\nplan: {recompute: [none, full], tensor: [1], pipeline: [2], target_global_batch: 4, micro_batches: [1]}\n' >"$work/plan-recompute.yaml"
expect 0 'TP 1 x PP 2 x DP 1, DDP +GPU +full ' -- plan "$work/plan-recompute.yaml" -q
# A pipeline layout: every stage replayed together, its own document.
expect 0 '"name": "comptrain.pipeline"' -- simulate "$data/../../scenarios/llama2-70b-tp8-pp4-4xh100.yaml" --json
expect 2 "--memory-csv and --plot take one rank's replay; .* has pipeline stages \(--timeline writes every stage's" -- simulate "$data/../../scenarios/llama2-70b-tp8-pp4-4xh100.yaml" --memory-csv "$work/t.csv"
sed "s#validation/model-configs#$data/../../scenarios/validation/model-configs#" "$data/../../scenarios/llama2-70b-tp8-pp4-4xh100.yaml" >"$work/pp-sweep.yaml"
printf 'sweep:\n  training.precision: [mixed, bf16]\n' >>"$work/pp-sweep.yaml"
# The error names the line of `pipeline:` in the file, wherever the example's comments put it.
pipeline_line=$(grep -n '^  pipeline: ' "$work/pp-sweep.yaml" | head -1 | cut -d: -f1)
expect 2 "pp-sweep.yaml:$pipeline_line:13: parallelism.pipeline: pipeline stages are replayed for one scenario by .simulate., .plan. and .validate.; sweeps do not take them" -- simulate "$work/pp-sweep.yaml"
expect_usage "missing option --platform" -- import "$data/import/llama3-8b-torchtitan.toml" -o -

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
