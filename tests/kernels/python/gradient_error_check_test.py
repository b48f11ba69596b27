"""comptrain_codecs.gradient_error_check on two small models: the weight-gradient error measured
with szp-compressed conv/linear inputs agrees with the error comptrain's CLI predicts (issue 16,
item 5a), and would not if the model, the capture's statistics or the hooks broke.

Run by ctest with the package's build directory on PYTHONPATH, COMPTRAIN_CLI (the CLI of the same
build) and COMPTRAIN_CAPTURE (traces/capture/comptrain_capture.py). Exits 77 (ctest's skip)
without torch.
"""

import math
import os
import sys
import unittest

try:
    import torch  # noqa: F401
except ImportError as error:
    print(error, "- skipped")
    sys.exit(77)

from comptrain_codecs import gradient_error_check as gec

# Measured / predicted must lie in [1 - TOL, 1 + TOL] for every covered layer (the 'weight path'
# run). models/README.md's 3 % on sigma is for its Monte Carlo, where sigma-hat averages 400 draws
# of E; here one step is one draw, and the realised ||delta G|| of one draw deviates from its
# expectation by the cross terms sum_{n != m} (delta_n . delta_m)(e_n . e_m), which matter when a
# layer has few rows (N = 8 at the transformer's classifier, 128 in its blocks): on these models
# and seeds the ratios span 0.95-1.085 (deterministic: fixed seeds, one thread). TOL = 0.2 is over
# twice that and still fails on the model's plausible breakages: a dropped 1 - z (z ~ 0.5 after a
# ReLU: x1.4), a dropped 1/3 (x1.7), delta_rms and terms taken at different batches (x sqrt(batch)).
TOL = 0.2


class GradientErrorCheck(unittest.TestCase):
    def check(self, factory, shape, batch):
        result = gec.run_check(f"comptrain_codecs.gradient_error_check:{factory}", batch, [1e-3, 1e-2],
                               os.environ["COMPTRAIN_CLI"], os.environ["COMPTRAIN_CAPTURE"],
                               input_shape=shape, num_classes=10, seed=0, threads=1)
        # The reference step is the captured one (same weights and batch): its RMS(G) is the
        # capture's.
        self.assertEqual(result["statistics_mismatch"], [])
        measured = [r for r in result["rows"] if r["absolute_error_bound"] is not None and r["predicted"]]
        self.assertGreaterEqual(len(measured), 4, result["rows"])
        for r in measured:
            first = r["layers"][0]
            ratio = r["measured"][first] / r["predicted"]
            with self.subTest(bound=r["bound"], layer=first):
                self.assertLess(abs(ratio - 1), TOL, f"{first} at {r['bound']}: measured {r['measured'][first]:.4g}, "
                                                     f"predicted {r['predicted']:.4g}")
            # The error scales with the bound: sanity of the measurement itself.
            self.assertGreater(r["measured"][first], 0)
        # With only the conv/linear saves compressed no error enters the data path: a layer whose
        # input is not compressed keeps its exact gradient.
        for b in result["per_bound"]:
            for path, e in b["layers"].items():
                if not e["input_compressed"]:
                    self.assertEqual(e["weight_path"], 0.0, f"{path} at {b['bound']}")
        # Ten times the bound gives ten times the error, layer by layer (within the noise).
        by = {(r["bound"], r["tensor"]): r for r in measured}
        for (bound, tensor), r in by.items():
            if bound == 1e-3 and (1e-2, tensor) in by:
                first = r["layers"][0]
                growth = by[(1e-2, tensor)]["measured"][first] / r["measured"][first]
                self.assertTrue(7 < growth < 13, f"{tensor}: x{growth:.2f} from 1e-3 to 1e-2")
        return result

    def test_small_cnn(self):
        result = self.check("small_cnn", "3,16,16", 16)
        # conv2's input is relu1's output: flagged by the CLI. Compressed for ReLU's backward too
        # ('all readers'), the mask's flips reach conv1's gradient, which the prediction does
        # not cover; conv2's own gradient is the same as with the weight path alone.
        self.assertTrue(any(r["relu_mask"] for r in result["rows"]))
        for b in result["per_bound"]:
            conv1, conv2 = b["layers"]["conv1"], b["layers"]["conv2"]
            self.assertFalse(conv1["input_compressed"])
            self.assertGreater(conv1["all_readers"], 0)
            self.assertEqual(conv2["all_readers"], conv2["weight_path"])
            # With the positive mask kept, ReLU's backward reads its exact mask: no error reaches
            # conv1, and conv2's is the weight path's, which the prediction covers.
            self.assertEqual(conv1["mask_kept"], 0.0)
            self.assertEqual(conv2["mask_kept"], conv2["weight_path"])
            self.assertGreater(b["compressed_bytes_mask_kept"], b["compressed_bytes_all_readers"])

    def test_small_transformer(self):
        result = self.check("small_transformer", "16,16", 8)
        # No ReLU in the transformer: nothing flagged, and every compressed tensor is read by
        # linear layers alone, so compressing it for all readers changes nothing.
        self.assertFalse(any(r["relu_mask"] for r in result["rows"]))
        for b in result["per_bound"]:
            for path, e in b["layers"].items():
                self.assertEqual(e["all_readers"], e["weight_path"], path)
                self.assertEqual(e["mask_kept"], e["weight_path"], path)
            self.assertEqual(b["compressed_bytes_mask_kept"], b["compressed_bytes_all_readers"])  # no ReLU output

    def test_bad_capture_path(self):
        with self.assertRaises(gec.CheckError):
            gec.run_check("x", 2, [1e-3], os.environ["COMPTRAIN_CLI"], "/nonexistent/comptrain_capture.py")


if __name__ == "__main__":
    unittest.main()
