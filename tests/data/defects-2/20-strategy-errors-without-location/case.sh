# Errors found while the schedule is built name the scenario, the rule's line and column and its
# field: the rule's position travels with it from the reader (models::StrategyRule::location).
expect 2 's-pageable\.yaml:7:7: strategy\.rules\[0\]: offload host_memory pageable needs the platform.s host_link\.pageable_bandwidth.*expected a platform that gives it' -- simulate s-pageable.yaml
expect 2 's-abs\.yaml:7:7: strategy\.rules\[0\]: error_bound_mode abs needs the value range of every tensor it compresses.*use a relative bound' -- simulate s-abs.yaml
expect 2 "s-adaptive\.yaml:7:7: strategy\.rules\[0\]: error_bound adaptive cannot bound 'maxpool\.out': .*has no gradient statistics.*or give fallback_error_bound for such tensors" -- simulate s-adaptive.yaml
