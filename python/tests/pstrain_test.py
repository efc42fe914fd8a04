"""pstrain's Python module: clusters, tables, variables, futures, checkpoints and errors, against
real in-process servers (python/pstrain/cluster.py, python/module.cc)."""

import json
import os
import tempfile
import threading
import unittest

import numpy as np

import pstrain

SGD = {"kind": "sgd", "learning_rate": 0.5}


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = pstrain.Cluster.in_process(workers=1, ps=2)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.shutdown()

    def test_in_process_spec_names_every_task(self):
        spec = self.cluster.spec["cluster"]
        self.assertEqual(len(spec["ps"]), 2)
        self.assertEqual(len(spec["worker"]), 1)
        self.assertEqual(self.cluster.num_ps, 2)

    def test_table_lookup_apply_assign_erase(self):
        t = self.cluster.create_table("t_basic", dim=4, optimizer=SGD,
                                      initializer={"kind": "constant", "value": 1.0})
        self.assertEqual((t.dim, t.num_shards), (4, 2))
        rows = t.lookup(np.array([1, 2, 3]))
        self.assertEqual(rows.dtype, np.float32)
        np.testing.assert_array_equal(rows, np.ones((3, 4), np.float32))
        # Repeated ids' gradients are summed: id 1 gets 2, id 2 gets 1.
        t.apply_gradients(np.array([1, 1, 2]), np.ones((3, 4), np.float32))
        got = t.lookup(np.array([[1, 2], [3, 1]]))
        self.assertEqual(got.shape, (2, 2, 4))
        np.testing.assert_allclose(got[0, 0], 0.0)
        np.testing.assert_allclose(got[0, 1], 0.5)
        np.testing.assert_allclose(got[1, 0], 1.0)
        t.assign([7], np.full((1, 4), 3.0, np.float32))
        np.testing.assert_allclose(t.lookup([7]), 3.0)
        self.assertEqual(t.size(), 4)
        t.erase([7])
        self.assertEqual(t.size(), 3)
        stats = t.stats()
        self.assertEqual(len(stats), 2)
        self.assertEqual(sum(s["keys"] for s in stats), 3)
        self.assertIsInstance(stats[0]["keys"], int)

    def test_ids_of_other_integer_dtypes_and_lists(self):
        t = self.cluster.create_table("t_dtypes", dim=2,
                                      initializer={"kind": "uniform", "minval": -1, "maxval": 1})
        want = t.lookup(np.array([5, 6], np.int64))
        np.testing.assert_array_equal(t.lookup(np.array([5, 6], np.int32)), want)
        np.testing.assert_array_equal(t.lookup([5, 6]), want)
        self.assertEqual(t.lookup(np.array([], np.int64)).shape, (0, 2))

    def test_eval_lookup_stores_nothing(self):
        t = self.cluster.create_table("t_eval", dim=3, default_value=0.25)
        np.testing.assert_allclose(t.lookup([10, 11], train=False), 0.25)
        self.assertEqual(t.size(), 0)
        t.lookup([10])
        self.assertEqual(t.size(), 1)

    def test_table_options_reach_the_ps(self):
        t = self.cluster.create_table("t_admit", dim=2, admit_min_count=2, row_format="float16")
        t.lookup([1])
        self.assertEqual(t.size(), 0)  # seen once: not admitted yet
        t.lookup([1])
        self.assertEqual(t.size(), 1)
        self.assertEqual(t.stats()[0]["row_format"], "ROW_FLOAT16")

    def test_async_calls_overlap_and_return_results(self):
        t = self.cluster.create_table("t_async", dim=8, optimizer=SGD)
        ids = np.arange(4096, dtype=np.int64)
        futures = [t.lookup_async(ids + i) for i in range(4)]
        for f in futures:
            self.assertEqual(f.result(timeout=30).shape, (4096, 8))
            self.assertTrue(f.done())
        push = t.apply_gradients_async(ids, np.ones((4096, 8), np.float32))
        self.assertIsNone(push.result())
        np.testing.assert_allclose(t.lookup(ids[:3]), -0.5)
        # A future keeps the arrays it reads alive: the caller may drop them at once.
        pending = t.lookup_async(np.arange(100000, dtype=np.int64) + 7)
        import gc
        gc.collect()
        rows = pending.result(timeout=30)
        np.testing.assert_array_equal(rows[:3], t.lookup([7, 8, 9]))
        # Dropped unfinished, a future waits for its call (its arrays are still being written).
        for i in range(8):
            t.lookup_async(np.arange(50000, dtype=np.int64) * (i + 2))

    def test_calls_from_threads_run_beside_each_other(self):
        t = self.cluster.create_table("t_threads", dim=4, optimizer=SGD)
        t.lookup([0, 1, 2, 3])  # a table drops gradients of ids it doesn't hold yet
        errors = []

        def loop(k):
            try:
                for _ in range(20):
                    t.apply_gradients(np.array([k]), np.ones((1, 4), np.float32))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=loop, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(errors, [])
        np.testing.assert_allclose(t.lookup([0, 1, 2, 3]), -10.0)

    def test_variables_with_partitioners(self):
        v = self.cluster.create_variable("v_fixed", [10, 3], partitioner="fixed", num_shards=3,
                                         optimizer=SGD,
                                         initializer={"kind": "constant", "value": 2.0})
        self.assertEqual((v.shape, v.num_shards), ((10, 3), 3))
        np.testing.assert_allclose(v.read(), 2.0)
        v.apply_gradients([0, 9], np.ones((2, 3), np.float32))
        np.testing.assert_allclose(v.lookup([0, 9, 5]), [[1.5] * 3, [1.5] * 3, [2.0] * 3])
        v.assign(np.arange(30, dtype=np.float32).reshape(10, 3))
        np.testing.assert_array_equal(v.lookup([4]), [[12, 13, 14]])
        v.apply_dense_gradients(np.ones((10, 3), np.float32))
        self.assertAlmostEqual(float(v.read()[0, 0]), -0.5)
        m = self.cluster.create_variable("v_max", [1000, 16], partitioner="max_size",
                                         max_shard_bytes=16 * 1024)
        self.assertEqual(m.num_shards, 4)  # 64000 bytes in shards of at most 16 KiB

    def test_errors_carry_the_code_and_the_message(self):
        t = self.cluster.create_table("t_errors", dim=4, optimizer=SGD)
        cases = [
            (lambda: t.lookup(np.array([1.5])), "INVALID_ARGUMENT", "dtype float64"),
            (lambda: t.apply_gradients([1], np.ones((1, 3), np.float32)), "INVALID_ARGUMENT",
             "shape (1, 3)"),
            (lambda: t.apply_gradients([1], np.ones((1, 4))), "INVALID_ARGUMENT",
             "float32, got dtype float64"),
            (lambda: self.cluster.table("no_such_table"), "NOT_FOUND", "no_such_table"),
            (lambda: self.cluster.create_table("t_errors", dim=5), "ALREADY_EXISTS", "t_errors"),
            (lambda: self.cluster.create_table("t_bad_opt", dim=4, optimizer={"kind": "nope"}),
             "INVALID_ARGUMENT", "optimizer"),
            (lambda: self.cluster.create_table("t_bad_field", dim=4, colour=3),
             "INVALID_ARGUMENT", "colour"),
            (lambda: self.cluster.create_variable("v_bad", [4], partitioner="diagonal"),
             "INVALID_ARGUMENT", "diagonal"),
            (lambda: pstrain.Cluster.connect('{"cluster": {"ps": ["nohostport"]}}'),
             "INVALID_ARGUMENT", ""),
            (lambda: pstrain.Cluster.connect("/no/such/spec.json"), "NOT_FOUND", "spec.json"),
        ]
        for call, code, text in cases:
            with self.subTest(code=code, text=text):
                with self.assertRaises(pstrain.Error) as raised:
                    call()
                self.assertEqual(raised.exception.code, code)
                self.assertIn(text, raised.exception.message)
                self.assertIn(code, str(raised.exception))

    def test_connect_reaches_the_tables_another_process_made(self):
        self.cluster.create_table("t_shared", dim=2, optimizer=SGD).assign(
            [42], np.array([[4.0, 2.0]], np.float32))
        other = pstrain.Cluster.connect(json.dumps(self.cluster.spec))
        np.testing.assert_array_equal(other.table("t_shared").lookup([42]), [[4.0, 2.0]])
        spec_file = os.path.join(tempfile.mkdtemp(), "spec.json")
        with open(spec_file, "w") as f:
            json.dump(self.cluster.spec, f)
        self.assertEqual(pstrain.Cluster.connect(spec_file).table("t_shared").dim, 2)


class CheckpointTest(unittest.TestCase):
    def test_save_then_restore_into_a_cluster_of_another_size(self):
        ckpt = tempfile.mkdtemp()
        ids = np.arange(1000, dtype=np.int64)
        with pstrain.Cluster.in_process(workers=1, ps=2) as a:
            t = a.create_table("emb", dim=4, optimizer="adagrad",
                               initializer={"kind": "normal", "stddev": 0.1, "seed": 3})
            v = a.create_variable("w", [6, 2], partitioner="fixed", num_shards=2)
            v.assign(np.arange(12, dtype=np.float32).reshape(6, 2))
            t.apply_gradients(ids, np.ones((1000, 4), np.float32))
            want = t.lookup(ids, train=False)
            path = a.save(ckpt, step=7)
            self.assertTrue(os.path.isdir(path))
        with pstrain.Cluster.in_process(workers=1, ps=3) as b:
            t = b.create_table("emb", dim=4, optimizer="adagrad",
                               initializer={"kind": "normal", "stddev": 0.1, "seed": 3})
            v = b.create_variable("w", [6, 2], partitioner="fixed", num_shards=2)
            restored = b.restore(ckpt)
            self.assertEqual(restored["step"], 7)
            np.testing.assert_array_equal(t.lookup(ids, train=False), want)
            np.testing.assert_array_equal(v.read(), np.arange(12).reshape(6, 2))
            with self.assertRaises(pstrain.Error) as raised:
                b.restore(tempfile.mkdtemp())
            self.assertEqual(raised.exception.code, "NOT_FOUND")


class DeadPsTest(unittest.TestCase):
    def test_a_dead_ps_is_unavailable_naming_it(self):
        with pstrain.Cluster.in_process(workers=1, ps=2) as c:
            t = c.create_table("emb", dim=4)
            t.lookup(np.arange(100))
            c.stop_task("ps", 1)
            with self.assertRaises(pstrain.Error) as raised:
                t.lookup(np.arange(100))
            self.assertEqual(raised.exception.code, "UNAVAILABLE")
            self.assertIn("ps:1", raised.exception.message)
            future = t.lookup_async(np.arange(100))
            with self.assertRaises(pstrain.Error) as raised:
                future.result(timeout=60)
            self.assertEqual(raised.exception.code, "UNAVAILABLE")


if __name__ == "__main__":
    unittest.main()
