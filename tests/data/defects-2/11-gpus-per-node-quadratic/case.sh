# gpus_per_node has a documented maximum (1,024), at its line.
expect 2 'p-2000\.yaml:22:16: .gpus_per_node. is 2000; expected at most 1024' -- simulate s-2000.yaml
expect 2 'p\.yaml:22:16: .gpus_per_node. is 10000; expected at most 1024' -- simulate s.yaml
