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
