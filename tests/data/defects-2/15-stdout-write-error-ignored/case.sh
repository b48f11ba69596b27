# shellcheck shell=bash
# shared/defects-2/15: when standard output could not be written (a full disk, a closed file),
# simulate, plan and trace show still exited 0 with nothing delivered. The CLI now checks
# standard output after every command: exit 2, "cannot write to standard output: REASON".
# /dev/full fails every write with ENOSPC; as a redirection it is never replaced.

# stdout_full ARGS...: `comptrain ARGS > /dev/full` exits 2 with the message, no internal error.
stdout_full() {
  check "comptrain $* > /dev/full: exit 2 and 'cannot write to standard output: No space left on device'" bash -c '
    err=$(ulimit -v 8388608; timeout 60 "$0" "$@" 2>&1 >/dev/full); code=$?
    echo "exit $code: $err"
    test $code -eq 2 && grep -q "^comptrain: error: cannot write to standard output: No space left on device$" <<<"$err" &&
      ! grep -q "internal error" <<<"$err"' "$bin" "$@"
}

stdout_full simulate s.yaml --json
stdout_full simulate s.yaml
stdout_full plan s.yaml -q
stdout_full trace show s.yaml
stdout_full trace show s.yaml --json
stdout_full trace export s.yaml -o -
stdout_full trace list
stdout_full validate t.jsonl
stdout_full validate t.jsonl --json
stdout_full --help
stdout_full --version
stdout_full help simulate
stdout_full compress --stats --codec szp --eb 1e-3 ../../activations/resnet18_relu.npy "$work/relu.ctk"

# The same reports to a working standard output still exit 0.
expect 0 '"name": "comptrain\.simulate"' -- simulate s.yaml --json
expect 0 'resnet18' -- trace list
