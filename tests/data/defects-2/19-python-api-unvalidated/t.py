"""shared/defects-2/19: the Python API refuses what the kernels cannot honour, when it is called:
counts beyond the kernels' maximum (2^40; 2^64-1 gave a wrapped 108 bytes), bounds that are not
finite and >= 0 (nan and -1.0 were returned as bounds), and compressed_activations' bits and
threads when the context is made (they failed inside the user's forward pass). Each refusal is a
CodecError (a ValueError) whose message names the argument and the expected range. Run by
tests/cli/defects2_test.sh; exits 77 without NumPy; the context-manager checks need torch."""
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)
import comptrain_codecs as cc

checks = 0


def refused(call, message):
    """Runs call(); it must raise a ValueError whose text contains `message`."""
    global checks
    try:
        result = call()
    except ValueError as e:
        if message not in str(e):
            print(f"FAILED: {e!r} does not say {message!r}")
            sys.exit(1)
        print(f"{type(e).__name__}: {e}")
        checks += 1
        return
    print(f"FAILED: accepted, returned {result!r}; expected a ValueError saying {message!r}")
    sys.exit(1)


x = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
count_range = "is out of range; expected 0 to the kernels' maximum 1099511627776 elements (2^40)"
refused(lambda: cc.max_compressed_size("szp", 2**64 - 1), "count 18446744073709551615 " + count_range)
refused(lambda: cc.max_compressed_size("szp", 2**62), "count 4611686018427387904 " + count_range)
bound_rule = "error bound must be a finite number >= 0"
refused(lambda: cc.absolute_bound(x, float("nan")), bound_rule + " (got nan)")
refused(lambda: cc.absolute_bound(x, -1.0), bound_rule + " (got -1)")
try:
    import torch  # noqa: F401  (compressed_activations needs it)
except ImportError:
    torch = None
if torch is not None:
    refused(lambda: cc.compressed_activations(codec="quant", bits=3, min_bytes=0), "quant bits must be 1, 2, 4 or 8 (got 3)")
    refused(lambda: cc.compressed_activations(codec="szp", threads=-1, min_bytes=0),
            "threads -1 is out of range; expected 0 (all cores, up to 256) to 256")
    refused(lambda: cc.compressed_activations(codec="szp", bits=4, min_bytes=0),
            "bits applies only to codec quant (its bits per value); codec szp takes none")
what = "count 2**64-1, count 2**62, bound nan, bound -1.0" + (", bits=3, threads=-1, bits with szp" if torch is not None else "")
print(f"19: {checks} checks passed: ValueErrors naming {what}")
