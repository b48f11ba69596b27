# The fitted platform is the base platform with only the fitted efficiencies changed: a 2-node
# run and a synchronous checkpoint still simulate on it (the scenarios name fitted.yaml, beside them).
cp m.yaml s.yaml s-cluster.yaml s-ckpt.yaml "$work/"
expect 0 'gemm +x[0-9.]+ +sensitivity' -- calibrate --from-measurements "$work/m.yaml" --fit-parameters gemm -o "$work/fitted.yaml"
check "fitted.yaml keeps nic, network, collectives, storage and torch_save_bandwidth" \
  bash -c "[[ \$(grep -c -E '^(nic|network|collectives|storage):|torch_save_bandwidth' '$work/fitted.yaml') -eq 5 ]]"
expect 0 'FITS' -- simulate "$work/s-cluster.yaml"
expect 0 'checkpoint' -- simulate "$work/s-ckpt.yaml"
