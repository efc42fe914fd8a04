"""pstrain.torch: Embedding and EmbeddingBag whose rows live on the ps tasks, against torch's own
modules on the same rows (python/pstrain/torch.py)."""

import unittest

import numpy as np
import torch

import pstrain
import pstrain.torch

ROWS, DIM, LR = 50, 6, 0.1


def make_pair(cluster, name, seed):
    """A table and a torch weight holding the same rows, both trained by plain SGD."""
    weight = torch.from_numpy(np.random.default_rng(seed).normal(0, 1, (ROWS, DIM))
                              .astype(np.float32))
    table = cluster.create_table(name, dim=DIM, optimizer={"kind": "sgd", "learning_rate": LR})
    table.assign(np.arange(ROWS), weight.numpy())
    return table, weight


class EmbeddingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = pstrain.Cluster.in_process(workers=1, ps=2)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.shutdown()

    def test_sgd_matches_torch_embedding_exactly(self):
        # The ps's SGD is w - lr * g rounded twice (a multiply, then a subtract); torch.optim.SGD
        # fuses them (one rounding, so it differs by up to 1 ulp). The torch side here takes the
        # ps's arithmetic, so every row must match bit for bit: the lookups, the gradients sent
        # (repeated ids summed) and the updates.
        table, weight = make_pair(self.cluster, "sgd_exact", seed=1)
        ours = pstrain.torch.Embedding(table)
        theirs = torch.nn.Embedding(ROWS, DIM)
        theirs.weight.data.copy_(weight)
        lr = torch.tensor(LR, dtype=torch.float32)
        rng = np.random.default_rng(2)
        for step in range(5):
            ids = torch.from_numpy(rng.integers(0, ROWS, (8, 3)))  # repeated ids, 2-D
            target = torch.from_numpy(rng.normal(0, 1, (8, 3, DIM)).astype(np.float32))
            out_ours, out_theirs = ours(ids), theirs(ids)
            self.assertEqual(out_ours.shape, (8, 3, DIM))
            torch.testing.assert_close(out_ours, out_theirs, rtol=0, atol=0)
            ((out_ours - target) ** 2).sum().backward()
            theirs.weight.grad = None
            ((out_theirs - target) ** 2).sum().backward()
            with torch.no_grad():
                theirs.weight.copy_(theirs.weight - lr * theirs.weight.grad)
            ours.flush()
            np.testing.assert_array_equal(table.lookup(np.arange(ROWS), train=False),
                                          theirs.weight.detach().numpy(), err_msg=f"step {step}")
        self.assertEqual(list(ours.parameters()), [])  # the rows are the ps's, not torch's

    def test_sgd_within_an_ulp_of_torch_optim_sgd(self):
        table, weight = make_pair(self.cluster, "sgd_optim", seed=5)
        ours = pstrain.torch.Embedding(table)
        theirs = torch.nn.Embedding(ROWS, DIM)
        theirs.weight.data.copy_(weight)
        opt = torch.optim.SGD(theirs.parameters(), lr=LR)
        ids = torch.tensor([3, 3, 9, 12])
        ours(ids).pow(2).sum().backward()
        opt.zero_grad()
        theirs(ids).pow(2).sum().backward()
        opt.step()
        ours.flush()
        np.testing.assert_allclose(table.lookup(np.arange(ROWS), train=False),
                                   theirs.weight.detach().numpy(), rtol=2.5e-7, atol=0)

    def test_embedding_bag_matches_torch_in_each_mode(self):
        for mode in ("sum", "mean", "max"):
            with self.subTest(mode=mode):
                table, weight = make_pair(self.cluster, f"bag_{mode}", seed=3)
                ours = pstrain.torch.EmbeddingBag(table, mode=mode)
                theirs = torch.nn.EmbeddingBag(ROWS, DIM, mode=mode)
                theirs.weight.data.copy_(weight)
                opt = torch.optim.SGD(theirs.parameters(), lr=LR)
                ids = torch.tensor([1, 2, 2, 7, 9, 1, 30])
                offsets = torch.tensor([0, 3, 4])
                out_ours, out_theirs = ours(ids, offsets), theirs(ids, offsets)
                torch.testing.assert_close(out_ours, out_theirs)
                out_ours.sum().backward()
                opt.zero_grad()
                out_theirs.sum().backward()
                opt.step()
                ours.flush()
                np.testing.assert_allclose(table.lookup(np.arange(ROWS), train=False),
                                           theirs.weight.detach().numpy(), rtol=0, atol=1e-6)
                two_d = torch.tensor([[1, 2], [3, 4]])
                torch.testing.assert_close(ours(two_d), theirs(two_d))

    def test_eval_mode_neither_stores_ids_nor_sends_gradients(self):
        table = self.cluster.create_table("eval_mode", dim=DIM, optimizer="sgd",
                                          default_value=0.5)
        emb = pstrain.torch.Embedding(table).eval()
        out = emb(torch.tensor([4, 5]))
        self.assertFalse(out.requires_grad)
        torch.testing.assert_close(out, torch.full((2, DIM), 0.5))
        self.assertEqual(table.size(), 0)

    def test_asynchronous_pushes_and_prefetch(self):
        table, weight = make_pair(self.cluster, "async_push", seed=4)
        emb = pstrain.torch.Embedding(table, wait_for_pushes=False, max_pending=3)
        batches = [torch.tensor([i, i + 1]) for i in range(10)]
        emb.prefetch(batches[0])
        for i, ids in enumerate(batches):
            out = emb(ids)
            if i + 1 < len(batches):
                emb.prefetch(batches[i + 1])
            out.sum().backward()
        emb.flush()
        # Each id in 0..10 got a gradient of 1 per batch it was in: 1 (ids 0, 10) or 2.
        got = table.lookup(np.arange(11), train=False)
        counts = np.array([1] + [2] * 9 + [1], np.float32)
        np.testing.assert_allclose(got, weight.numpy()[:11] - LR * counts[:, None], atol=1e-6)

    def test_tables_take_and_return_torch_tensors(self):
        table, weight = make_pair(self.cluster, "tensors", seed=6)
        rows = table.lookup(torch.tensor([[1, 2], [3, 4]]))
        self.assertIsInstance(rows, torch.Tensor)
        self.assertEqual(rows.shape, (2, 2, DIM))
        torch.testing.assert_close(rows[1, 1], weight[4])
        grads = torch.ones(2, DIM, requires_grad=True) * 1.0  # not a leaf: needs detaching
        table.apply_gradients(torch.tensor([1, 2]), grads)
        np.testing.assert_allclose(table.lookup(np.array([1])), weight[1:2].numpy() - LR,
                                   atol=1e-6)

    def test_bad_ids_are_refused(self):
        emb = pstrain.torch.Embedding(self.cluster.create_table("bad_ids", dim=2))
        with self.assertRaises(TypeError):
            emb(torch.tensor([0.5]))
        with self.assertRaises(ValueError):
            pstrain.torch.EmbeddingBag(emb.table)(torch.tensor([1, 2]))  # 1-D without offsets

    def test_a_push_to_a_dead_ps_raises_at_the_next_forward(self):
        with pstrain.Cluster.in_process(workers=1, ps=1) as c:
            emb = pstrain.torch.Embedding(c.create_table("emb", dim=2, optimizer="sgd"))
            out = emb(torch.tensor([1, 2]))
            c.stop_task("ps", 0)
            out.sum().backward()
            with self.assertRaises(pstrain.Error) as raised:
                emb(torch.tensor([1]))
            self.assertEqual(raised.exception.code, "UNAVAILABLE")


if __name__ == "__main__":
    unittest.main()
