# A torus with dimensions of extent 1 ([1, 1, 2], [2, 1, 1]) is built without them (they join a
# node to itself, and SimGrid aborted on two such links of the same name): the run completes.
expect 0 'FITS' -- simulate s.yaml
sed 's/torus: \[1, 1, 2\]/torus: [2, 1, 1]/' p.yaml > "$work/p.yaml"
cp s.yaml "$work/s.yaml"
expect 0 'FITS' -- simulate "$work/s.yaml"
