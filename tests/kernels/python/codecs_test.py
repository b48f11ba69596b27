"""comptrain_codecs on NumPy arrays and CPU torch tensors: round trips within each codec's bound,
streams byte-identical to `comptrain compress`, decoding of the CLI's streams, bad inputs.

Run by ctest (tests/CMakeLists.txt) with the package's build directory on PYTHONPATH and
COMPTRAIN_CLI naming the comptrain binary of the same build. Exits 77 (ctest's skip) without NumPy.
"""

import os
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    print("numpy is not installed for", sys.executable, "- skipped")
    sys.exit(77)

try:
    import torch
except ImportError:
    torch = None

import comptrain_codecs as cc

CLI = os.environ.get("COMPTRAIN_CLI")


def samples():
    """Activation-like float32 arrays: smooth, post-ReLU (half zeros), heavy-tailed with
    special values, in 1 to 4 dimensions, sizes crossing the codecs' 8192-value chunks."""
    rng = np.random.default_rng(16)
    smooth = np.sin(np.linspace(0, 40, 3 * 20011)).astype(np.float32).reshape(3, 20011)
    relu = np.maximum(rng.standard_normal((2, 16, 24, 24)), 0).astype(np.float32)
    heavy = rng.standard_cauchy(50021).astype(np.float32)
    heavy[[5, 700, 9000]] = [np.nan, np.inf, -0.0]
    small = rng.standard_normal((7, 11, 13)).astype(np.float32)
    return {"smooth": smooth, "relu": relu, "heavy": heavy, "small": small}


def finite_range(x):
    f = x[np.isfinite(x)]
    return float(f.max() - f.min()) if f.size else 0.0


def max_abs_error(x, y):
    mask = np.isfinite(x)
    return float(np.max(np.abs(x[mask].astype(np.float64) - y[mask].astype(np.float64)))) if mask.any() else 0.0


def same_bits(x, y):
    return np.array_equal(np.ascontiguousarray(x).view(np.uint32), np.ascontiguousarray(y).view(np.uint32))


class RoundTrip(unittest.TestCase):
    def test_every_codec_is_offered(self):
        names = {c["name"] for c in cc.codecs()}
        self.assertEqual(names, {"szp", "szh", "zeros", "quant", "fp16", "bf16", "zfp"})
        self.assertEqual({c["name"] for c in cc.codecs() if c["cuda"]}, {"szp", "zeros"})

    def test_strict_codecs_hold_the_bound_on_every_element(self):
        for codec in ("szp", "szh"):
            for name, x in samples().items():
                for mode in ("rel", "abs"):
                    for eb in (1e-1, 1e-3, 1e-5):
                        with self.subTest(codec=codec, sample=name, mode=mode, eb=eb):
                            stream = cc.compress(x, codec, eb, mode)
                            y = cc.decompress(stream)
                            self.assertEqual(y.shape, x.shape)
                            self.assertEqual(y.dtype, np.float32)
                            bound = eb * finite_range(x) if mode == "rel" else eb
                            self.assertAlmostEqual(cc.inspect(stream)["absolute_bound"], bound, delta=bound * 1e-6)
                            self.assertEqual(cc.inspect(stream)["mode"], mode)
                            self.assertLessEqual(max_abs_error(x, y), bound)
                            # NaN, Inf and -0.0 bit for bit; exact zeros stay zeros.
                            special = ~np.isfinite(x) | ((x == 0) & np.signbit(x))
                            self.assertTrue(same_bits(x[special], y[special]))
                            self.assertTrue(np.all(y[(x == 0) & ~np.signbit(x)] == 0))

    def test_positive_mask_keeps_the_sign(self):
        for codec in ("szp", "szh"):
            for name, x in samples().items():
                with self.subTest(codec=codec, sample=name):
                    stream = cc.compress(x, codec, 1e-1, "rel", positive_mask=True)
                    header = cc.inspect(stream)
                    self.assertTrue(header["positive_mask"])
                    self.assertEqual(len(stream), len(cc.compress(x, codec, 1e-1, "rel")) + (x.size + 7) // 8)
                    y = cc.decompress(stream)
                    self.assertTrue(np.array_equal(y > 0, x > 0))
                    finite = np.isfinite(x)
                    self.assertLessEqual(max_abs_error(x[finite], y[finite]), header["absolute_bound"])
        self.assertFalse(cc.inspect(cc.compress(samples()["relu"], "szp", 1e-1))["positive_mask"])
        for codec in ("zeros", "fp16"):
            with self.assertRaises(cc.CodecError):
                cc.compress(samples()["relu"], codec, positive_mask=True)

    def test_zfp_meets_its_tolerance_on_finite_data(self):
        # zfp's tolerance is not a strict guarantee (kernels/README.md); on these finite arrays it holds.
        for name, x in samples().items():
            if not np.all(np.isfinite(x)):
                continue
            for mode in ("rel", "abs"):
                with self.subTest(sample=name, mode=mode):
                    eb = 1e-3
                    y = cc.decompress(cc.compress(x, "zfp", eb, mode))
                    bound = eb * finite_range(x) if mode == "rel" else eb
                    self.assertLessEqual(max_abs_error(x, y), bound)

    def test_codecs_without_a_bound_keep_their_documented_accuracy(self):
        x = samples()["relu"]
        self.assertTrue(same_bits(cc.decompress(cc.compress(x, "zeros")), x))  # lossless
        y = cc.decompress(cc.compress(x, "fp16"))
        np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))  # round to nearest even
        y = cc.decompress(cc.compress(x, "bf16"))
        self.assertLessEqual(float(np.max(np.abs(y - x) / np.maximum(np.abs(x), 1e-30))), 2.0**-8)
        for bits in (1, 2, 4, 8):
            with self.subTest(bits=bits):
                y = cc.decompress(cc.compress(x, "quant", bits=bits))
                # Half a quantisation step of each 256-value group (ActNN's group size).
                groups = x.reshape(-1, 256)
                half_step = (groups.max(axis=1) - groups.min(axis=1)) / (2 ** bits - 1) / 2
                error = np.abs(y.reshape(-1, 256) - groups).max(axis=1)
                self.assertTrue(np.all(error <= half_step * (1 + 1e-5) + 1e-30))

    def test_decompress_into_and_threads(self):
        x = samples()["relu"]
        stream = cc.compress(x, "szp", 1e-3, "rel", threads=3)
        self.assertEqual(stream, cc.compress(x, "szp", 1e-3, "rel"))  # the stream does not depend on threads
        out = np.empty(x.size, dtype=np.float32)  # any shape with as many elements
        self.assertIs(cc.decompress(stream, out=out, threads=2), out)
        self.assertTrue(same_bits(out.reshape(x.shape), cc.decompress(stream)))
        # Streams may come from any buffer: bytearray, memoryview, a uint8 array.
        for buffer in (bytearray(stream), memoryview(stream), np.frombuffer(stream, dtype=np.uint8)):
            self.assertTrue(same_bits(cc.decompress(buffer), cc.decompress(stream)))

    def test_size_bound(self):
        x = np.random.default_rng(1).standard_normal(100003).astype(np.float32)
        for codec in ("szp", "szh", "zeros"):
            eb = 1e-7 if codec != "zeros" else None
            self.assertLessEqual(len(cc.compress(x, codec, eb, "abs")), cc.max_compressed_size(codec, x.size))

    def test_absolute_bound(self):
        x = samples()["heavy"]
        self.assertAlmostEqual(cc.absolute_bound(x, 1e-3, "rel"), 1e-3 * finite_range(x), delta=1e-9 * finite_range(x))
        self.assertEqual(cc.absolute_bound(x, 0.5, "abs"), 0.5)


@unittest.skipIf(torch is None, "torch is not installed")
class TorchTensors(unittest.TestCase):
    def test_cpu_tensor_gives_the_array_stream(self):
        x = samples()["relu"]
        t = torch.from_numpy(x.copy()).requires_grad_()
        self.assertEqual(cc.compress(t, "szp", 1e-3, "rel"), cc.compress(x, "szp", 1e-3, "rel"))
        stream = cc.compress(t, "szh", 1e-2, "abs")
        back = cc.decompress(stream, device="cpu")
        self.assertIsInstance(back, torch.Tensor)
        self.assertEqual(tuple(back.shape), x.shape)
        self.assertLessEqual(float((back - t.detach()).abs().max()), 1e-2)
        out = torch.empty(x.shape)
        cc.decompress(stream, out=out)
        self.assertTrue(torch.equal(out, back))

    def test_tensor_errors(self):
        with self.assertRaisesRegex(TypeError, "float32"):
            cc.compress(torch.zeros(10, dtype=torch.float64), "szp", 1e-3)
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            cc.compress(torch.zeros(10, 10).t(), "szp", 1e-3)

    @unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device for torch")
    def test_cuda_tensor_stream_equals_the_cpu_stream(self):
        # Runs only where PyTorch sees a GPU (never on the development machine).
        x = samples()["relu"]
        for codec, eb in (("szp", 1e-3), ("zeros", None), ("szh", 1e-3)):
            with self.subTest(codec=codec):
                t = torch.from_numpy(x).cuda()
                stream = cc.compress(t, codec, eb, "rel")
                self.assertEqual(stream, cc.compress(x, codec, eb, "rel"))
                back = cc.decompress(stream, device=t.device)
                self.assertEqual(back.device, t.device)
                self.assertTrue(same_bits(back.cpu().numpy(), cc.decompress(stream)))


@unittest.skipUnless(CLI, "COMPTRAIN_CLI is not set")
class SameAsTheCommandLine(unittest.TestCase):
    """`comptrain compress` and the package are the same library call: identical bytes."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def cli(self, *args, refusal_ok=False):
        result = subprocess.run([CLI, *args], capture_output=True, text=True)
        if result.returncode == 2 and refusal_ok:
            return result.stderr
        if result.returncode != 0:
            self.fail(f"comptrain {' '.join(args)} exited {result.returncode}: {result.stderr}")
        return None

    def test_streams_are_byte_identical(self):
        cases = [("szp", 1e-3, "rel", 8), ("szp", 1e-2, "abs", 8), ("szh", 1e-3, "rel", 8), ("szh", 1e-4, "abs", 8),
                 ("zfp", 1e-3, "rel", 8), ("zfp", 1e-3, "abs", 8), ("zeros", None, None, 8), ("fp16", None, None, 8),
                 ("bf16", None, None, 8), ("quant", None, None, 2), ("quant", None, None, 8)]
        for name, x in samples().items():
            path = os.path.join(self.dir.name, name + ".npy")
            np.save(path, x)
            for codec, eb, mode, bits in cases:
                with self.subTest(sample=name, codec=codec, eb=eb, mode=mode, bits=bits):
                    out = os.path.join(self.dir.name, f"{name}.{codec}.ctk")
                    args = ["compress", "--codec", codec]
                    if eb is not None:
                        args += ["--eb", repr(eb)] + (["--rel"] if mode == "rel" else [])
                    if codec == "quant":
                        args += ["--bits", str(bits)]
                    refusal = self.cli(*args, path, out, refusal_ok=True)
                    # bits are quant's alone, in Python as with --bits.
                    quant_bits = bits if codec == "quant" else None
                    if refusal is not None:
                        # The same refusal (zfp and NaN/Inf), with the same message.
                        with self.assertRaises(cc.CodecError) as caught:
                            cc.compress(np.load(path), codec, eb, mode or "rel", bits=quant_bits)
                        self.assertIn(str(caught.exception), refusal)
                        continue
                    with open(out, "rb") as f:
                        expected = f.read()
                    stream = cc.compress(np.load(path), codec, eb, mode or "rel", bits=quant_bits)
                    self.assertEqual(len(stream), len(expected))
                    self.assertTrue(stream == expected, "streams differ")

    def test_raw_input_is_one_dimensional(self):
        x = samples()["small"]
        path = os.path.join(self.dir.name, "small.f32")
        x.tofile(path)
        out = os.path.join(self.dir.name, "small.ctk")
        self.cli("compress", "--codec", "szp", "--eb", "0.001", "--rel", path, out)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), cc.compress(x.reshape(-1), "szp", 1e-3, "rel"))

    def test_the_cli_decodes_our_streams_and_we_decode_its(self):
        x = samples()["relu"]
        ours = os.path.join(self.dir.name, "ours.ctk")
        with open(ours, "wb") as f:
            f.write(cc.compress(x, "szh", 1e-3, "rel"))
        back = os.path.join(self.dir.name, "back.npy")
        self.cli("decompress", ours, back)
        cli_array = np.load(back)
        self.assertEqual(cli_array.shape, x.shape)
        with open(ours, "rb") as f:
            self.assertTrue(same_bits(cli_array, cc.decompress(f.read())))


class BadInput(unittest.TestCase):
    def setUp(self):
        self.x = samples()["relu"]

    def test_bad_codec_and_bounds_raise_the_kernels_message(self):
        with self.assertRaisesRegex(cc.CodecError, r"unknown codec 'lz4' \(known: szp, szh"):
            cc.compress(self.x, "lz4", 1e-3)
        with self.assertRaisesRegex(cc.CodecError, "error bound must be a finite number >= 0"):
            cc.compress(self.x, "szp", -1e-3)
        with self.assertRaisesRegex(cc.CodecError, "error bound must be a finite number >= 0"):
            cc.compress(self.x, "szh", float("nan"))
        with self.assertRaisesRegex(cc.CodecError, "needs an error_bound"):
            cc.compress(self.x, "szp")
        with self.assertRaisesRegex(cc.CodecError, "not error-bounded"):
            cc.compress(self.x, "fp16", 1e-3)
        with self.assertRaisesRegex(cc.CodecError, "quant bits must be 1, 2, 4 or 8"):
            cc.compress(self.x, "quant", bits=3)
        with self.assertRaisesRegex(ValueError, "mode must be 'rel'"):
            cc.compress(self.x, "szp", 1e-3, "relative")
        self.assertTrue(issubclass(cc.CodecError, ValueError))
        self.assertTrue(issubclass(cc.StreamError, cc.CodecError))

    def test_arguments_beyond_the_kernels_range_raise_value_errors(self):
        # shared/defects-2/19: wrapped worst cases, non-finite and negative bounds returned,
        # thread counts that started one OS thread per chunk (shared/defects-2/03).
        for count in (2**64 - 1, 2**64, 2**62, cc.MAX_ELEMENTS + 1, -1):
            with self.subTest(count=count):
                with self.assertRaisesRegex(cc.CodecError, r"count .* is out of range; expected 0 to the kernels' maximum "
                                                           r"1099511627776 elements \(2\^40\)"):
                    cc.max_compressed_size("szp", count)
        self.assertGreater(cc.max_compressed_size("szp", cc.MAX_ELEMENTS), 4 * cc.MAX_ELEMENTS)
        with self.assertRaisesRegex(cc.CodecError, r"count 1234567890123456789012345678901234567\.\.\. is out of range"):
            cc.max_compressed_size("szp", int("1234567890" * 6))  # the value cut to a few dozen characters
        for bound in (float("nan"), float("inf"), -1.0):
            with self.subTest(bound=bound):
                with self.assertRaisesRegex(cc.CodecError, "error bound must be a finite number >= 0"):
                    cc.absolute_bound(self.x, bound)
        self.assertEqual(cc.absolute_bound(self.x, 0.0), 0.0)
        self.assertEqual(cc.MAX_THREADS, 256)
        for threads in (-1, 257, 100000, 2**70):
            with self.subTest(threads=threads):
                with self.assertRaisesRegex(cc.CodecError, r"threads .* is out of range; expected 0 \(all cores, up to 256\) to 256"):
                    cc.compress(self.x, "szp", 1e-3, threads=threads)
                with self.assertRaisesRegex(cc.CodecError, "threads .* is out of range"):
                    cc.decompress(cc.compress(self.x, "zeros"), threads=threads)
        with self.assertRaisesRegex(TypeError, "threads: expected an int, got str"):
            cc.compress(self.x, "szp", 1e-3, threads="4")
        stream = cc.compress(self.x, "szp", 1e-3)
        self.assertEqual(cc.compress(self.x, "szp", 1e-3, threads=cc.MAX_THREADS), stream)
        self.assertTrue(same_bits(cc.decompress(stream, threads=cc.MAX_THREADS), cc.decompress(stream)))

    def test_bits_are_quants_alone(self):
        for codec, bound in (("szp", 1e-3), ("zeros", None), ("fp16", None), ("zfp", 1e-3)):
            with self.subTest(codec=codec):
                with self.assertRaisesRegex(cc.CodecError, f"bits applies only to codec quant \\(its bits per value\\); "
                                                           f"codec {codec} takes none"):
                    cc.compress(self.x, codec, bound, bits=8)
        self.assertEqual(cc.compress(self.x, "quant"), cc.compress(self.x, "quant", bits=8))
        with self.assertRaisesRegex(cc.CodecError, "bits 16 is out of range; expected 1, 2, 4 or 8"):
            cc.compress(self.x, "quant", bits=16)
        self.assertEqual(cc.max_compressed_size("szp", 1000), cc.max_compressed_size("szp", 1000, None))
        self.assertLess(cc.max_compressed_size("quant", 1000, 2), cc.max_compressed_size("quant", 1000))

    def test_an_empty_array_with_a_huge_dimension_round_trips(self):
        # shared/defects-2/22: a (2^41, 0) array holds no value; its stream decodes to it.
        empty = np.zeros((2**41, 0), np.float32)
        stream = cc.compress(empty, "szp", 1e-3)
        self.assertEqual(cc.inspect(stream)["shape"], (2**41, 0))
        self.assertEqual(cc.decompress(stream).shape, (2**41, 0))

    def test_bad_arrays_raise(self):
        with self.assertRaisesRegex(TypeError, "float32"):
            cc.compress(self.x.astype(np.float64), "szp", 1e-3)
        with self.assertRaisesRegex(TypeError, "float32"):
            cc.compress(self.x.astype(">f4"), "szp", 1e-3)
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            cc.compress(self.x.transpose(3, 2, 1, 0), "szp", 1e-3)
        with self.assertRaisesRegex(ValueError, "1 to 4 dimensions"):
            cc.compress(self.x.reshape(2, 4, 4, 24, 24), "szp", 1e-3)
        with self.assertRaisesRegex(ValueError, "1 to 4 dimensions"):
            cc.compress(np.float32(1.0).reshape(()), "szp", 1e-3)

    def test_bad_streams_raise_stream_error(self):
        stream = cc.compress(self.x, "szp", 1e-3)
        with self.assertRaisesRegex(cc.StreamError, "truncated"):
            cc.decompress(stream[:-1])
        with self.assertRaisesRegex(cc.StreamError, "shorter than the 96-byte header"):
            cc.decompress(stream[:50])
        flipped = bytearray(stream)
        flipped[len(stream) // 2] ^= 0x10
        with self.assertRaisesRegex(cc.StreamError, "checksum"):
            cc.decompress(bytes(flipped))
        with self.assertRaisesRegex(cc.StreamError, "magic"):
            cc.decompress(b"NOPE" + stream[4:])
        with self.assertRaisesRegex(cc.StreamError, "checksum"):
            cc.inspect(bytes(flipped))
        with self.assertRaisesRegex(cc.CodecError, "does not match the stream's element count"):
            cc.decompress(stream, out=np.empty(self.x.size + 1, dtype=np.float32))
        with self.assertRaisesRegex(ValueError, "read-only"):
            cc.decompress(stream, out=np.frombuffer(bytes(self.x.size * 4), dtype=np.float32))


if __name__ == "__main__":
    unittest.main()
