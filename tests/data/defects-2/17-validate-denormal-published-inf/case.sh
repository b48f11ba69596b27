# Published figures are bounded (1e-9 to 1e18 in the metric's unit), so that no error is infinite.
expect 2 "t\.jsonl:1: field 'published': found 5e-324; expected a positive number from 1e-09 to 1e\+18 in the metric's unit" -- validate t.jsonl
expect 2 "t\.jsonl:1: field 'published': found 5e-324; expected a positive number from 1e-09 to 1e\+18" -- validate t.jsonl --json
# The smallest figure allowed gives a finite error, in the text and in JSON.
sed 's/5e-324/1e-9/' t.jsonl > "$work/t.jsonl"
cp s.yaml "$work/s.yaml"
expect 0 'throughput_samples_per_s +1 +[0-9.e+]+%' -- validate "$work/t.jsonl"
expect 0 '"median_abs_error": [0-9.e+]+,' -- validate "$work/t.jsonl" --json
