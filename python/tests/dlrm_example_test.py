"""The DLRM example (python/examples/dlrm_example.py), small: two Python worker processes train
the model with its table on two ps tasks, beside the one-process PyTorch peer, and both reach a
stated AUC on held-out rows of the synthetic log (whose best possible AUC is about 0.80)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import dlrm_example  # noqa: E402


class DlrmExampleTest(unittest.TestCase):
    def test_workers_train_to_the_one_process_peers_auc(self):
        out = dlrm_example.main(["--workers=2", "--ps=2", "--train_rows=200000",
                                 "--test_rows=20000", "--epochs=2", "--peer"])
        ours, peer = out["pstrain"], out["torch_one_process"]
        self.assertGreater(out["best_auc"], 0.79)
        self.assertGreater(ours["test_auc"], 0.71)
        self.assertGreater(peer["test_auc"], 0.71)
        self.assertGreater(ours["test_auc"], peer["test_auc"] - 0.01)
        self.assertEqual(ours["examples"], 2 * (100000 // 512) * 512 * 2)


if __name__ == "__main__":
    unittest.main()
