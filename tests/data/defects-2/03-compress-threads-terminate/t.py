"""shared/defects-2/03 in Python: threads beyond the kernels' maximum raise CodecError (a
ValueError) before any thread starts; 256 threads (szp, szh) under the reproducer's 4 GiB address-space limit,
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
# szh too: its ranges need 4 MiB of histograms each, allocated before the threads start (fewer
# threads when they do not fit), and its overflow grows without throwing.
streams = {codec: cc.compress(x, codec, 1e-3) for codec in ("szp", "szh")}
values = {codec: cc.decompress(stream) for codec, stream in streams.items()}
out = np.empty_like(x)
_, hard = resource.getrlimit(resource.RLIMIT_AS)
for limit in (4 << 30, address_space_bytes() + (96 << 20)):
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    for codec, one in streams.items():
        expect(cc.compress(x, codec, 1e-3, threads=256) == one, f"{codec}, threads=256 under {limit} bytes: another stream")
        cc.decompress(one, out=out, threads=256)
        expect(np.array_equal(out.view(np.uint32), values[codec].view(np.uint32)),
               f"{codec}, threads=256 under {limit} bytes: other values")
print(f"python: no crash; 03: {checks} checks passed (threads=100000 refused by compress and decompress; szp and szh "
      "with threads=256 under 4 GiB and under VmSize + 96 MiB: the one-thread stream and values)")
