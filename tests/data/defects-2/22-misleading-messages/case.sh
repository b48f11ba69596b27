# kernels part
# shared/defects-2/22: a (2^41, 0) array holds no value. Its stream (what
# comptrain_codecs.compress(np.zeros((2**41, 0), np.float32), 'szp', 1e-3) writes) decompresses to
# a .npy that compress reads back (it said "has more than 1099511627776 elements"): the stream and
# .npy readers count elements alike, a 0 dimension first (kernels' element_count).
expect 0 '^$' -- decompress empty-2p41x0.ctk "$work/z.npy"
check "z.npy has the stream's shape (2199023255552, 0)" grep -aq "'shape': (2199023255552, 0)" "$work/z.npy"
expect 0 '^$' -- compress --codec szp --eb 1e-3 --rel "$work/z.npy" "$work/z2.ctk"
check "compress writes the stream back byte for byte" cmp empty-2p41x0.ctk "$work/z2.ctk"

# calibrate -o part
# -o naming a directory is refused before the fit, with what was expected.
mkdir -p "$work/outdir"
expect 2 'outdir/: expected a file name \(the platform is named after it\)' -- calibrate --from-measurements m.yaml -o "$work/outdir/"
expect 2 'outdir: it is a directory; expected a file name' -- calibrate --from-measurements m.yaml -o "$work/outdir"
check "-o outdir/ fails before the fit starts" bash -c "! '$bin' calibrate --from-measurements m.yaml -o '$work/outdir/' 2>&1 | grep -q fitting"

# shellcheck shell=bash
# shared/defects-2/22 (the parts about input files and byte counts):
# - `budget: 9223372036854775807 B` (exactly 2^63-1, the documented maximum) was refused as
#   "9.22337e+18 B; expected at most 2^63-1 B": the byte parser went through a double. Byte counts
#   are now exact from the digits as written; 2^63 is refused as written. The same parser reads
#   min_bytes and data.bytes_per_sample.
# - `comptrain validate .` said ".: no points; expected one JSON object per line": the table
#   reader opened the directory as a file. It is now refused by name.

expect 0 'FITS' -- simulate s-budget.yaml
expect 2 "s-budget-2p63\.yaml:4:64: 'strategy\.rules\[0\]\.recompute\.budget' is 9223372036854775808 B; expected at most 2\^63-1 B" -- simulate s-budget-2p63.yaml
expect 2 "s-min-bytes\.yaml:9:27: 'strategy\.rules\[1\]\.select\.min_bytes' is 9223372036854775808 B; expected at most 2\^63-1 B" -- simulate s-min-bytes.yaml
expect 2 "s-data\.yaml:4:26: 'data\.bytes_per_sample' is 9223372036854775808 B; expected at most 2\^63-1 B" -- simulate s-data.yaml

expect 2 "cannot read '\.': it is a directory; expected a regular file" -- validate .
# A byte count accepted alone can still overflow once multiplied by the samples of an iteration:
# 2^62 B x 2 samples was read "in 0.000000 s" (exit 0); now refused, naming the field.
expect 2 "s-data-2p62\.yaml:[0-9]+:[0-9]+: data\.bytes_per_sample: 4611686018427387904 bytes x 2 samples per iteration overflows 64 bits" -- simulate s-data-2p62.yaml
