# The loader's warm-up is bounded before it runs (20,000 iterations, the I/O simulation's own
# limit), and so are its wake-ups; under 8 GiB no actor stack fails to allocate.
expect 2 's\.yaml:5:.*data\.prefetch_factor 1024 x data\.workers_per_gpu 1024: the loader.s warm-up is at least 2099202 simulated iterations.*expected at most 20000' -- simulate s.yaml
expect 2 's-workers\.yaml:5:.*data\.workers_per_gpu 1024 on 2 GPU\(s\) with prefetch_factor 2: the loader.s warm-up of 6146 iterations would wake the node.s workers about [0-9]+ times.*expected at most 10000000' -- simulate s-workers.yaml
