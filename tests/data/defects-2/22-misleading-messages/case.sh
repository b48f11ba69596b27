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
