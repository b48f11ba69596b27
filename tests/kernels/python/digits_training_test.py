"""comptrain_codecs.digits_training, one short epoch (issue 16, item 5b): the small CNN trains on
scikit-learn's digits without compression, at a fixed bound and at the CLI's adaptive bounds;
each learns (well above chance), the compressed runs pack the conv/linear inputs the CLI lists and
hold less memory after forward, and the adaptive bounds are per layer and grow with the tolerance.

Run by ctest with the package's build directory on PYTHONPATH, COMPTRAIN_CLI and
COMPTRAIN_CAPTURE. Exits 77 (ctest's skip) without torch or scikit-learn (python3-sklearn).
"""

import json
import os
import sys
import tempfile
import unittest

try:
    import torch  # noqa: F401
    import sklearn.datasets  # noqa: F401
except ImportError as error:
    print(error, "- skipped")
    sys.exit(77)

from comptrain_codecs import digits_training


class DigitsTraining(unittest.TestCase):
    def test_one_epoch(self):
        with tempfile.TemporaryDirectory() as tmp:
            out, svg = os.path.join(tmp, "digits.json"), os.path.join(tmp, "digits.svg")
            status = digits_training.main(["--models", "cnn", "--fixed", "1e-2", "--tolerances", "0.01,0.1",
                                           "--epochs", "1", "--comptrain", os.environ["COMPTRAIN_CLI"],
                                           "--capture", os.environ["COMPTRAIN_CAPTURE"], "--json", out,
                                           "--svg", svg])
            self.assertEqual(status, 0)
            with open(out, encoding="utf-8") as f:
                result = json.load(f)
            with open(svg, encoding="utf-8") as f:
                self.assertIn("<svg", f.read())
        runs = {r["policy"]: r for r in result["results"]}
        self.assertEqual(set(runs), {"none", "fixed 0.01", "adaptive 0.01", "adaptive 0.1"})
        for policy, r in runs.items():
            # Ten classes: chance is 0.1; one epoch of 22 Adam steps reaches ~0.7.
            self.assertGreater(r["accuracy"][-1], 0.4, policy)
            if policy == "none":
                self.assertEqual(r["packed_bytes"], 0)
            else:
                self.assertGreater(r["packed_bytes"], r["stream_bytes"], policy)
                self.assertGreater(r["held_bytes_saved"], 0, policy)
                self.assertLess(r["packed_bytes"], r["saved_float_bytes"], policy)
        tight, loose = result["adaptive_bounds"]["cnn adaptive 0.01"], result["adaptive_bounds"]["cnn adaptive 0.1"]
        self.assertEqual(set(tight), {"conv2", "fc"})  # conv1 reads the input batch, which the caller holds
        self.assertNotEqual(tight["conv2"], tight["fc"])
        for layer in tight:
            self.assertAlmostEqual(loose[layer] / tight[layer], 10, delta=1e-6)  # the bound is linear in the tolerance


if __name__ == "__main__":
    unittest.main()
