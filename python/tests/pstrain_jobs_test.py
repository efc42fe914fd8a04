"""pstrain.fit, pstrain.export and pstrain.Predictor: a tabular job on a synthetic click log, from
training to predictions (python/pstrain/jobs.py, python/pstrain/serving.py)."""

import os
import sys
import tempfile
import unittest

import numpy as np

import pstrain

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import click_data  # noqa: E402


class JobTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pstrain-jobs-test-")
        cls.train_csv = os.path.join(cls.tmp, "train.csv")
        cls.test_csv = os.path.join(cls.tmp, "test.csv")
        cls.test = click_data.make_click_log(4000, seed=11)
        click_data.write_csv(click_data.make_click_log(30000, seed=10), cls.train_csv)
        click_data.write_csv(cls.test, cls.test_csv)
        cls.spec = click_data.feature_spec(cls.test_csv)
        cls.checkpoints = os.path.join(cls.tmp, "ckpt")
        cls.progress = []
        cls.summary = pstrain.fit(model="tabular", data=cls.train_csv, feature_spec=cls.spec,
                                  cluster="in_process:workers=2,ps=2", epochs=2,
                                  batch_size=256, checkpoint_dir=cls.checkpoints, logdir="",
                                  progress=cls.progress.append, progress_interval="0s",
                                  log=None)

    def test_fit_returns_the_summary_and_reports_progress(self):
        s = self.summary
        self.assertEqual(s["model"], "tabular")
        self.assertEqual((s["workers"], s["ps"]), (2, 2))
        self.assertGreater(s["end_step"], 100)
        # The synthetic log's best AUC is about 0.80; a short run gets well above chance.
        self.assertGreater(s["test_auc"], 0.65)
        self.assertTrue(self.progress)
        last = self.progress[-1]
        self.assertLessEqual(last["step"], s["end_step"])
        self.assertEqual(last["total_steps"], s["end_step"])
        self.assertGreater(last["examples_per_sec"], 0)
        self.assertTrue(last["line"].startswith("step "))

    def test_export_then_predict_from_columns_and_a_dataframe(self):
        out = os.path.join(self.tmp, "model", "1")
        exported = pstrain.export(self.checkpoints, out)
        self.assertEqual(exported["model"], "tabular")
        self.assertEqual(exported["step"], self.summary["end_step"])
        with self.assertRaises(pstrain.Error) as raised:
            pstrain.export(self.checkpoints, out)
        self.assertEqual(raised.exception.code, "ALREADY_EXISTS")

        predictor = pstrain.Predictor(out)
        self.assertEqual(predictor.model, "tabular")
        n = 500
        columns = {f"f{i}": [f"v{v}" for v in self.test["sparse"][:n, i]]
                   for i in range(click_data.NUM_SPARSE)}
        columns.update({f"d{i}": self.test["dense"][:n, i]
                        for i in range(click_data.NUM_DENSE)})
        p = predictor.predict(columns)
        self.assertEqual(p.shape, (n, len(predictor.outputs)))
        self.assertTrue(np.all((p >= 0) & (p <= 1)))
        # The exported model ranks held-out rows as the job's test evaluation did.
        self.assertGreater(click_data.auc(self.test["label"][:n], p[:, 0]), 0.62)

        import pandas
        np.testing.assert_allclose(predictor.predict(pandas.DataFrame(columns)), p, rtol=1e-6)
        missing = dict(columns)
        del missing["f3"]
        with self.assertRaises(pstrain.Error) as raised:
            predictor.predict(missing)
        self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
        self.assertIn("f3", raised.exception.message)
        with self.assertRaises(pstrain.Error) as raised:
            predictor.predict({"f0": ["v1", "v2"], "d0": [1.0]})
        self.assertEqual(raised.exception.code, "INVALID_ARGUMENT")
        with self.assertRaises(pstrain.Error) as raised:
            pstrain.Predictor(os.path.join(self.tmp, "no_model"))
        self.assertEqual(raised.exception.code, "NOT_FOUND")

    def test_fit_on_a_cluster_in_this_process(self):
        with pstrain.Cluster.in_process(workers=2, ps=1) as cluster:
            s = pstrain.fit(model="tabular", data=self.train_csv, feature_spec=self.spec,
                            cluster=cluster, max_steps=40, batch_size=128, checkpoint_dir="",
                            logdir="", log=None)
        self.assertEqual((s["workers"], s["ps"], s["end_step"]), (2, 1, 40))

    def test_a_bad_job_raises_with_the_jobs_error(self):
        cases = [
            (dict(feature_spec=dict(self.spec, colour=1)), "colour"),
            (dict(feature_spec=self.spec, no_such_flag=3), "no_such_flag"),
            (dict(feature_spec=self.spec, data="/no/such/file.csv"), "/no/such/file.csv"),
        ]
        for kwargs, text in cases:
            with self.subTest(text=text):
                args = dict(model="tabular", data=self.train_csv, checkpoint_dir="", logdir="",
                            log=None)
                args.update(kwargs)
                with self.assertRaises(pstrain.Error) as raised:
                    pstrain.fit(**args)
                self.assertIn(text, raised.exception.message)


if __name__ == "__main__":
    unittest.main()
