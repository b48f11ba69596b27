# kernels part
# shared/defects-2/19: every refusal is a ValueError naming the argument and the range (t.py
# checks each message and fails on the first that differs; 7 checks with torch, 4 without it).
expect_python 0 '^19: (7 checks passed: ValueErrors naming count 2\*\*64-1, count 2\*\*62, bound nan, bound -1\.0, bits=3, threads=-1, bits with szp|4 checks passed: ValueErrors naming count 2\*\*64-1, count 2\*\*62, bound nan, bound -1\.0)$' -- t.py
