"""PyTorch modules whose rows live on the ps tasks (docs/python.md).

    emb = pstrain.torch.Embedding(cluster.create_table("emb", dim=16, optimizer="adagrad"))
    out = emb(ids)          # ids: an int64 tensor of any shape -> shape + (16,)
    loss.backward()         # the rows' gradients go to the ps, whose optimizer applies them

Forward looks up the batch's ids (a training lookup in train(), an evaluation one in eval():
absent ids then read the table's default row and nothing is stored). Backward sends the rows'
gradients to the ps tasks, asynchronously: the table's own optimizer applies them there, as
PERSIA's and TFRA's dynamic embeddings do, while the dense part trains with any torch optimizer
(model.parameters() holds no table rows). By default a forward waits for the module's earlier
pushes, so a single process trains as plain PyTorch would; wait_for_pushes=False lets up to
max_pending pushes run behind the next lookups (asynchronous training, staleness <= max_pending).
prefetch(ids) starts the next batch's lookup while this one computes.
"""

import collections

import numpy as np
import torch
import torch.nn.functional as F

from pstrain.cluster import Table


def _ids_array(ids):
    if not isinstance(ids, torch.Tensor):
        ids = torch.as_tensor(ids)
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"ids must be an integer tensor, got {ids.dtype}")
    return ids.detach().to("cpu", torch.int64).contiguous().numpy()


class _TableModule(torch.nn.Module):
    def __init__(self, table, wait_for_pushes=True, max_pending=4):
        super().__init__()
        if not isinstance(table, Table):
            raise TypeError(f"table must be a pstrain.Table, got {type(table).__name__}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.table = table
        self.wait_for_pushes = wait_for_pushes
        self.max_pending = max_pending
        self.step = 0  # the global step sent with lookups and pushes (0: the shards' own count)
        self._pending = collections.deque()
        self._prefetched = None  # (ids array, Future)

    @property
    def embedding_dim(self):
        return self.table.dim

    def prefetch(self, ids):
        """Starts looking up `ids` (the next batch's) now; the forward given equal ids uses it.
        It reads the rows as they are when it runs, before this step's push lands."""
        flat = _ids_array(ids).reshape(-1)
        self._prefetched = (flat, self.table.lookup_async(flat, self.training, self.step))

    def flush(self):
        """Waits until every gradient this module sent is applied; raises the first error."""
        while self._pending:
            self._pending.popleft().result()

    def _reap(self, keep):
        # Finished pushes leave (an error is raised here, at the next forward); then at most
        # `keep` stay in flight.
        while self._pending and (self._pending[0].done() or len(self._pending) > keep):
            self._pending.popleft().result()

    def _rows(self, flat):
        """The rows of `flat` ids as a (n, dim) tensor; in training, a leaf whose gradient is sent
        to the ps tasks."""
        self._reap(0 if self.wait_for_pushes else self.max_pending - 1)
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and np.array_equal(prefetched[0], flat):
            values = prefetched[1].result()
        else:
            values = self.table.lookup(flat, self.training, self.step)
        rows = torch.from_numpy(values.reshape(len(flat), self.table.dim))
        if self.training and torch.is_grad_enabled():
            rows.requires_grad_(True)
            step = self.step
            rows.register_hook(lambda grad: self._push(flat, grad, step))
        return rows

    def _push(self, flat, grad, step):
        grad = grad.detach().to("cpu", torch.float32).contiguous().numpy()
        self._pending.append(self.table.apply_gradients_async(flat, grad, step))
        return None


class Embedding(_TableModule):
    """torch.nn.Embedding over a pstrain.Table: forward(ids) returns ids.shape + (dim,)."""

    def forward(self, ids):
        ids_np = _ids_array(ids)
        rows = self._rows(ids_np.reshape(-1))
        return rows.view(*ids_np.shape, self.table.dim)


class EmbeddingBag(_TableModule):
    """torch.nn.EmbeddingBag over a pstrain.Table: sums ("sum"), averages ("mean") or takes the
    largest ("max") of each bag's rows. forward(input, offsets=None, per_sample_weights=None) as
    torch's: a 2-D input is one bag per row; a 1-D one needs offsets."""

    def __init__(self, table, mode="mean", **kwargs):
        super().__init__(table, **kwargs)
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode must be sum, mean or max, got {mode!r}")
        self.mode = mode

    def forward(self, input, offsets=None, per_sample_weights=None):
        ids_np = _ids_array(input)
        if ids_np.ndim == 2 and offsets is not None:
            raise ValueError("offsets must be None when input is 2-D (one bag per row)")
        if ids_np.ndim == 1 and offsets is None:
            raise ValueError("offsets are needed when input is 1-D")
        if ids_np.ndim not in (1, 2):
            raise ValueError(f"input must be 1-D or 2-D, got {ids_np.ndim}-D")
        rows = self._rows(ids_np.reshape(-1))
        positions = torch.arange(rows.shape[0]).view(ids_np.shape)
        return F.embedding_bag(positions, rows, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights)
