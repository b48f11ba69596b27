# shellcheck shell=bash
# shared/defects-2/01: every -o output was written to a temporary file and renamed over its
# target, whatever that was: a FIFO and a symbolic link were replaced by regular files (exit 0),
# process substitution failed ("cannot create a temporary file in '/dev/fd'"). Now a FIFO and
# an open descriptor are written in place, a link is followed and kept, a directory refused.
# (/dev/null and /dev/full are left to tests/support/atomic_file_test.cpp's /dev/null case: a
# regression here, run as root, would replace the machine's device node.)

# A FIFO: its reader gets the whole trace, and it stays a FIFO.
mkfifo "$work/out.fifo"
(timeout 30 cat "$work/out.fifo" >"$work/got.json") &
reader=$!
expect 0 'wrote .*out\.fifo \([0-9]+ ops' -- trace export resnet18 -o "$work/out.fifo"
wait "$reader"
check "out.fifo is still a FIFO" test -p "$work/out.fifo"
check "the FIFO's reader got the trace" grep -q '"format": "comptrain-trace"' "$work/got.json"

# A symbolic link (dangling: its target does not exist yet): the target is written, the link kept.
ln -s target.json "$work/link"
expect 0 'wrote .*link' -- trace export resnet18 -o "$work/link"
check "link is still a symbolic link" test -L "$work/link"
check "link's target was written" grep -q '"format": "comptrain-trace"' "$work/target.json"
expect 0 'wrote .*link' -- trace export alexnet -o "$work/link"
check "link's target was replaced by the second export" grep -q '"name": "alexnet"' "$work/target.json"

# Process substitution: bash passes /dev/fd/63, one of comptrain's own descriptors.
check "-o >(cat > ps.json) delivers the trace, exit 0" \
  bash -c 'timeout 60 "$1" trace export resnet18 -o >(cat >"$2") 2>/dev/null; code=$?; wait $!; test $code -eq 0 && grep -q "\"format\": \"comptrain-trace\"" "$2"' \
  _ "$bin" "$work/ps.json"

# A directory is refused by name, as is a path that names no file.
mkdir -p "$work/outdir"
expect 2 "cannot write '.*outdir': it is a directory; expected a regular file" -- trace export resnet18 -o "$work/outdir"
expect 2 "cannot write '.*outdir/': expected a file name, not a directory" -- trace export resnet18 -o "$work/outdir/"
