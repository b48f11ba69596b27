# shellcheck shell=bash
# shared/defects-2/12: every input was read whole, with no size limit and no check that it was
# a regular file: /dev/zero as a scenario, an hf_config or a stream read until memory ran out
# (exit 1 "std::bad_alloc"), a FIFO blocked forever. Every input now goes through read_file:
# regular files of at most 1 GiB, anything else refused by name before a byte is read.
# (s.yaml: `model: {hf_config: /dev/zero, ...}`.)

expect 2 "cannot read '/dev/zero': it is a character device; expected a regular file" -- simulate /dev/zero
expect 2 "cannot read '/dev/zero': it is a character device; expected a regular file" -- simulate s.yaml
expect 2 "cannot read '/dev/zero': it is a character device; expected a regular file" -- decompress /dev/zero "$work/out.npy"
expect 2 "cannot read '/dev/zero': it is a character device; expected a regular file" -- compress --codec szp --eb 1e-3 /dev/zero "$work/out.ctk"
expect 2 "cannot read '/dev/zero': it is a character device; expected a regular file" -- trace import /dev/zero -o "$work/t.json"
expect 2 "cannot read '/dev/zero': it is a character device; expected a regular file" -- validate /dev/zero
expect 2 "cannot read '/dev/zero': it is a character device; expected a regular file" -- merge /dev/zero
expect 2 "cannot read '/dev/zero': it is a character device; expected a regular file" -- calibrate --from-measurements /dev/zero -o "$work/fit.yaml"

# A link to /dev/zero is what it points to.
ln -s /dev/zero "$work/zero.yaml"
ln -s /dev/zero "$work/zero.json"
expect 2 "cannot read '.*zero\.yaml': it is a character device; expected a regular file" -- simulate "$work/zero.yaml"
expect 2 "cannot read '.*zero\.json': it is a character device; expected a regular file" -- trace show "$work/zero.json"

# FIFOs: refused at once, never waited on (each command would block forever for a writer).
mkfifo "$work/in.fifo" "$work/p.yaml" "$work/t.jsonl"
expect 2 "cannot read '.*in\.fifo': it is a FIFO; expected a regular file" -- simulate "$work/in.fifo"
expect 2 "cannot read '.*in\.fifo': it is a FIFO; expected a regular file" -- trace import "$work/in.fifo" -o "$work/t.json"
expect 2 "cannot read '.*t\.jsonl': it is a FIFO; expected a regular file" -- validate "$work/t.jsonl"
# A platform file named by a scenario: the scenario's line and column as well.
printf 'model: {zoo: resnet18}\ntraining: {batch_size: 2}\nplatform: p.yaml\n' >"$work/s-platform.yaml"
expect 2 "s-platform\.yaml:3:11: platform: cannot read '.*p\.yaml': it is a FIFO; expected a regular file" -- simulate "$work/s-platform.yaml"
expect 2 "cannot read '.*p\.yaml': it is a FIFO; expected a regular file" -- simulate "$work/s-platform.yaml" --platform "$work/p.yaml"
# A calibration profile named by a compress rule: located at the rule's `profile` too.
printf 'model: {zoo: resnet18}\ntraining: {batch_size: 2}\nplatform: a100-40gb\nstrategy: {name: s, rules: [{select: {min_bytes: 1 MiB}, compress: {profile: p.yaml}}]}\n' >"$work/s-profile.yaml"
expect 2 "s-profile\.yaml:4:78: 'strategy\.rules\[0\]\.compress\.profile': cannot read '.*p\.yaml': it is a FIFO; expected a regular file" -- simulate "$work/s-profile.yaml"

# A directory: refused by name (validate said ".: no points").
expect 2 "cannot read '\.': it is a directory; expected a regular file" -- validate .

# Larger than 1 GiB (a sparse file: no disk used): refused from its size, nothing read.
truncate -s 1100M "$work/big.yaml"
expect 2 "cannot read '.*big\.yaml': it is larger than 1 GiB \(1073741824 bytes\), the most comptrain reads from one input file" -- simulate "$work/big.yaml"
