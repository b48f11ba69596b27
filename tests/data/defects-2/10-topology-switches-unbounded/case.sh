# The platform reader bounds what SimGrid would build of a topology, at its line.
expect 2 'p-fat\.yaml:27:13: .network\.fat_tree. builds 11111111 switches; expected at most 100000' -- simulate s-fat.yaml
expect 2 'p-dfly\.yaml:27:14: .network\.dragonfly. builds 5000050000 links; expected at most 200000' -- simulate s-dfly.yaml
