# calibrate -o part
# -o naming a directory is refused before the fit, with what was expected.
mkdir -p "$work/outdir"
expect 2 'outdir/: expected a file name \(the platform is named after it\)' -- calibrate --from-measurements m.yaml -o "$work/outdir/"
expect 2 'outdir: it is a directory; expected a file name' -- calibrate --from-measurements m.yaml -o "$work/outdir"
check "-o outdir/ fails before the fit starts" bash -c "! '$bin' calibrate --from-measurements m.yaml -o '$work/outdir/' 2>&1 | grep -q fitting"
