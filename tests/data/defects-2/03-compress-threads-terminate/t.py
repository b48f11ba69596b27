"""shared/defects-2/03 in Python: threads beyond the kernels' maximum raise CodecError (a
ValueError) before any thread starts; 256 threads under the reproducer's 4 GiB address-space limit,
and under a limit that leaves room for only a few thread stacks, give the one-thread stream and
array (a thread that cannot start leaves its chunks to the calling thread): never std::terminate,
which killed the interpreter. Run by tests/cli/defects2_test.sh; exits 77 without NumPy."""
import resource
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)
import comptrain_codecs as cc

checks = 0


def expect(condition, what):
    global checks
    if not condition:
        print("FAILED:", what)
        sys.exit(1)
    checks += 1


def address_space_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


x = np.random.default_rng(0).standard_normal(8192 * 600).astype(np.float32)
for call in (lambda: cc.compress(x, "szp", 1e-3, threads=100000), lambda: cc.decompress(b"", threads=100000)):
    try:
        call()
        expect(False, "threads=100000 accepted")
    except cc.CodecError as e:
        print("threads=100000: CodecError:", e)
        expect("threads 100000 is out of range" in str(e), str(e))
one = cc.compress(x, "szp", 1e-3)
values = cc.decompress(one)
out = np.empty_like(x)
_, hard = resource.getrlimit(resource.RLIMIT_AS)
for limit in (4 << 30, address_space_bytes() + (96 << 20)):
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    expect(cc.compress(x, "szp", 1e-3, threads=256) == one, f"threads=256 under {limit} bytes: another stream")
    cc.decompress(one, out=out, threads=256)
    expect(np.array_equal(out.view(np.uint32), values.view(np.uint32)), f"threads=256 under {limit} bytes: other values")
print(f"python: no crash; 03: {checks} checks passed (threads=100000 refused by compress and decompress; threads=256 "
      "under 4 GiB and under VmSize + 96 MiB: the one-thread stream and values)")
