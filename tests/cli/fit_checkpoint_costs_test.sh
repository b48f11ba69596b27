#!/usr/bin/env bash
# scripts/fit-checkpoint-costs.py: the fit of Polaris's checkpoint costs that
# scenarios/validation/README.md ("The fitted checkpoint costs") and polaris.yaml record. At the
# recorded values and two neighbours it must find the recorded values best, with the recorded
# medians (8.7% over the 18 fit points, 10.2% over the 34 held out); a pattern matching no point
# and a malformed grid are refused.
# Usage: fit_checkpoint_costs_test.sh PATH/TO/comptrain PATH/TO/source-tree
set -u
source "$(dirname "$0")/check_lib.sh" "$@"
script=$src/scripts/fit-checkpoint-costs.py

out=$(python3 "$script" --comptrain "$bin" --overhead-ms 120,140 --copy-gbs 12 --save-gbs 1.1,1.2 2>&1) ||
  fail "the fit exited non-zero: $(tail -5 <<<"$out")"
grep -q '^best: overhead 140 ms, copy 12 GB/s, torch.save 1.2 GB/s: fit median 8.7%, held out 10.2%$' <<<"$out" ||
  fail "the fit's best is not the recorded one: $(tail -5 <<<"$out")"
[[ $(grep -c 'fit median .* (18), held out .* (34)$' <<<"$out") -eq 4 ]] || fail "expected 4 combinations of 18 fit and 34 held-out points: $out"

python3 "$script" --comptrain "$bin" --overhead-ms 140 --copy-gbs 12 --save-gbs 1.2 --fit 'nope-*' >/dev/null 2>&1 &&
  fail "a fit pattern that matches no point was accepted"
python3 "$script" --comptrain "$bin" --copy-gbs 12,fast >/dev/null 2>&1 && fail "a malformed grid was accepted"
finish fit_checkpoint_costs
