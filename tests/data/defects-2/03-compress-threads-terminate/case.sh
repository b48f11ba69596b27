# kernels part
# shared/defects-2/03: `--threads` / `threads=` had no upper bound; the CPU driver started one OS
# thread per 8192-value chunk, and when one could not be created (an address-space limit) the
# std::system_error left joinable std::threads behind: std::terminate, SIGABRT, for the CLI and
# for the Python interpreter. Now: at most 256 threads (kernels/include/comptrain/kernels/codec.hpp,
# kMaxThreads), more refused before any thread starts (exit 2 / CodecError), and a thread that
# cannot start leaves its chunks to the calling thread (the same stream, exit 0).
expect 2 '^comptrain: error: --threads: found 100000, out of range; expected an integer from 0 to 256' -- compress --codec szp --eb 1e-3 --threads 100000 x.npy "$work/x.ctk"
expect 2 '^comptrain: error: --threads: found 100000, out of range; expected an integer from 0 to 256' -- decompress --threads 100000 x.ctk "$work/x.npy"
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  # The reproducer's 20 MB array: 600 chunks.
  /usr/bin/python3 -c "import numpy as np; np.save('$work/x.npy', np.random.default_rng(0).standard_normal(8192 * 600).astype(np.float32))"
  expect 2 '^comptrain: error: --threads: found 100000, out of range; expected an integer from 0 to 256' -- compress --codec szp --eb 1e-3 --threads 100000 "$work/x.npy" "$work/x.ctk"
  expect 0 '^$' -- compress --codec szp --eb 1e-3 "$work/x.npy" "$work/x1.ctk"
  expect 0 '^$' -- decompress "$work/x1.ctk" "$work/x1.npy"
  # The reproducer's limit (4 GiB), and 1 GiB, where most of the 256 threads cannot start.
  for kib in 4194304 1048576; do
    check "compress --threads 256 under ulimit -v $kib: exit 0 and the one-thread stream" \
      bash -c "ulimit -v $kib; timeout 60 '$bin' compress --codec szp --eb 1e-3 --threads 256 '$work/x.npy' '$work/x256.ctk' && cmp '$work/x1.ctk' '$work/x256.ctk'"
    check "decompress --threads 256 under ulimit -v $kib: exit 0 and the one-thread array" \
      bash -c "ulimit -v $kib; timeout 60 '$bin' decompress --threads 256 '$work/x1.ctk' '$work/x256.npy' && cmp '$work/x1.npy' '$work/x256.npy'"
  done
  expect_python 0 '^python: no crash; 03: 10 checks passed \(threads=100000 refused by compress and decompress; szp and szh with threads=256 under 4 GiB' -- t.py
fi
