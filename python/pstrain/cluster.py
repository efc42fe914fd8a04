"""Clusters, and the dynamic tables and variables on their ps tasks (docs/python.md).

A Cluster is either started in this process (real gRPC servers on picked localhost ports, as the
tests use) or connected to the ps tasks of a running job from its cluster spec (TF_CONFIG JSON).
Tables and variables take and return NumPy arrays, ids of any integer dtype and values float32.
Torch tensors work too: a CPU tensor is read through NumPy without a copy, and a lookup of torch
ids returns a torch tensor over the rows the lookup wrote.
"""

import json

import numpy as np

from pstrain import _pstrain

# Enum-valued option fields: a lower-case name is accepted ("adagrad" for "ADAGRAD"), and a row
# format's may leave out its prefix ("float16" for "ROW_FLOAT16").
_ENUM_FIELDS = {"kind", "staleness_scaling"}
_ROW_FORMAT_FIELDS = {"row_format", "slot_format"}


def _normalized(value):
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            if key in _ENUM_FIELDS and isinstance(v, str):
                v = v.upper()
            elif key in _ROW_FORMAT_FIELDS and isinstance(v, str):
                v = v.upper()
                if not v.startswith("ROW_"):
                    v = "ROW_" + v
            out[key] = _normalized(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    return value


def _is_tensor(x):
    return type(x).__module__ == "torch" and type(x).__name__ == "Tensor"


def _array(x):
    """A torch tensor as the NumPy array over its memory (detached; moved to the CPU first if it
    is elsewhere); anything else as it is (the extension reads arrays and lists)."""
    if _is_tensor(x):
        return x.detach().cpu().numpy()
    return x


def _rows_like(ids, rows):
    """Rows as a torch tensor (over the same memory) when the ids came as one."""
    if _is_tensor(ids):
        import torch
        return torch.from_numpy(rows)
    return rows


def _message_json(value, what):
    """An initializer or optimizer (a dict of proto/ps_service.proto's fields, or only its kind as
    a string) as the JSON the C++ parses; None -> "" (the defaults)."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a dict or a kind name, got {type(value).__name__}")
    return json.dumps(_normalized(value))


class Table:
    """A dynamic table: rows of `dim` floats keyed by int64 ids, on the ps tasks' shards.

    lookup() of ids shaped S returns float32 rows shaped S + (dim,); apply_gradients() takes
    gradients of that shape and applies them with the table's server-side optimizer (repeated ids
    are summed). The *_async forms return a pstrain.Future at once, so a training loop can look
    up the next batch while it computes this one.
    """

    def __init__(self, handle):
        self._t = handle

    @property
    def name(self):
        return self._t.name

    @property
    def dim(self):
        return self._t.dim

    @property
    def num_shards(self):
        return self._t.num_shards

    def lookup(self, ids, train=True, step=0):
        """Rows of `ids`. train=True stores ids the table lacks (admission permitting); False (an
        evaluation lookup) never changes the table: an absent id reads the default row. Torch ids
        give a torch tensor of rows."""
        return _rows_like(ids, self._t.lookup(_array(ids), train, step, False))

    def lookup_async(self, ids, train=True, step=0):
        """lookup() as a Future whose result() is the rows (a NumPy array)."""
        return self._t.lookup(_array(ids), train, step, True)

    def apply_gradients(self, ids, grads, step=0):
        self._t.apply_gradients(_array(ids), _array(grads), step, False)

    def apply_gradients_async(self, ids, grads, step=0):
        """apply_gradients() as a Future (result() is None once applied)."""
        return self._t.apply_gradients(_array(ids), _array(grads), step, True)

    def assign(self, ids, values):
        """Sets the rows of `ids` (storing ids the table lacks, without admission)."""
        self._t.assign(_array(ids), _array(values))

    def erase(self, ids):
        self._t.erase(_array(ids))

    def size(self):
        """Ids held, over every shard."""
        return self._t.size()

    def stats(self):
        """Each shard's counters (proto/ps_service.proto's DynamicShardStats), as dicts."""
        return self._t.stats()

    def __repr__(self):
        return f"pstrain.Table({self.name!r}, dim={self.dim}, shards={self.num_shards})"


class Variable:
    """A fixed-shape variable split into shards by a TF partitioner (dims[0] is split).

    lookup() of row ids shaped S returns S + shape[1:]; read() the whole variable; assign() sets
    it; apply_gradients() (sparse, by row) and apply_dense_gradients() go through its optimizer.
    """

    def __init__(self, handle):
        self._v = handle

    @property
    def name(self):
        return self._v.name

    @property
    def shape(self):
        return tuple(self._v.shape)

    @property
    def num_shards(self):
        return self._v.num_shards

    def lookup(self, ids):
        return _rows_like(ids, self._v.lookup(_array(ids), False))

    def lookup_async(self, ids):
        return self._v.lookup(_array(ids), True)

    def apply_gradients(self, ids, grads):
        self._v.apply_gradients(_array(ids), _array(grads), False)

    def apply_gradients_async(self, ids, grads):
        return self._v.apply_gradients(_array(ids), _array(grads), True)

    def read(self):
        return self._v.read()

    def assign(self, values):
        self._v.assign(_array(values))

    def apply_dense_gradients(self, grads):
        self._v.apply_dense_gradients(_array(grads))

    def __repr__(self):
        return f"pstrain.Variable({self.name!r}, shape={self.shape}, shards={self.num_shards})"


class Cluster:
    """ps tasks (and workers) reached from Python. Use Cluster.in_process() or Cluster.connect().

    A cluster started in this process stops when shutdown() is called, when the `with` block
    ends, or when the object is collected.
    """

    def __init__(self, session):
        self._s = session

    @staticmethod
    def in_process(workers=1, ps=1, ps_memory_budget=0, ps_disk_dir=""):
        """Starts `ps` ps tasks and `workers` worker tasks in this process, each a real gRPC
        server on a picked localhost port. The workers run every model's closures, so a job
        (pstrain.fit(cluster=...)) can train on them. ps_memory_budget: bytes per ps (0: none)."""
        return Cluster(_pstrain.Session.in_process(workers, ps, int(ps_memory_budget),
                                                   ps_disk_dir))

    @staticmethod
    def connect(spec):
        """The ps tasks of a running cluster: `spec` is TF_CONFIG-style JSON (a str, a dict, or
        the path of a JSON file) with a "ps" job."""
        if isinstance(spec, dict):
            spec = json.dumps(spec)
        return Cluster(_pstrain.Session.connect(spec))

    @property
    def spec(self):
        """The cluster spec, TF_CONFIG-style: {"cluster": {"ps": [...], "worker": [...]}}."""
        return json.loads(self._s.spec_json)

    @property
    def num_ps(self):
        return self._s.num_ps

    @property
    def num_workers(self):
        return self._s.num_workers

    def create_table(self, name, dim, initializer=None, optimizer=None, num_shards=0, **options):
        """Creates dynamic table `name` (or returns it, if created with the same arguments).

        initializer: {"kind": "truncated_normal", "stddev": 0.01, "seed": 1} (zeros by default);
        optimizer: {"kind": "adagrad", "learning_rate": 0.05, "schedule": {...}} or a kind name
        (None: the table takes no gradients); num_shards: 0 for one per ps task; options: any
        field of DynamicTableDef (admit_min_count, admit_probability, ttl_steps, max_rows,
        max_bytes, default_value, disk_tier, row_format, slot_format, ...)."""
        return Table(self._s.create_table(
            name, int(dim), int(num_shards), _message_json(initializer, "initializer"),
            _message_json(optimizer, "optimizer"),
            json.dumps(_normalized(options)) if options else ""))

    def table(self, name):
        """The table `name` the ps tasks hold (made here or by another process)."""
        return Table(self._s.table(name))

    def create_variable(self, name, shape, dtype="float32", partitioner="none", num_shards=0,
                        min_shard_bytes=0, max_shard_bytes=0, max_shards=-1, initializer=None,
                        optimizer=None):
        """Creates variable `name` of `shape`, split by TF's partitioner: "none", "fixed"
        (num_shards), "min_size" (min_shard_bytes, max_shards) or "max_size" (max_shard_bytes,
        max_shards); shards go round-robin over the ps tasks."""
        return Variable(self._s.create_variable(
            name, [int(d) for d in shape], dtype, partitioner, int(num_shards),
            int(min_shard_bytes), int(max_shard_bytes), int(max_shards),
            _message_json(initializer, "initializer"), _message_json(optimizer, "optimizer")))

    def variable(self, name):
        return Variable(self._s.variable(name))

    def save(self, checkpoint_dir, step, incremental=False, keep=3):
        """Checkpoints every table and variable created through this Cluster into
        `checkpoint_dir` at `step` (consistent, atomic; see docs/checkpoints.md); returns the
        checkpoint's path."""
        return self._s.save(str(checkpoint_dir), int(step), incremental, keep)

    def restore(self, path):
        """Restores a checkpoint (or a directory's latest) into the tables and variables created
        through this Cluster; returns {"path", "step", "bytes"}."""
        return self._s.restore(str(path))

    def stop_task(self, task_type, index):
        """Stops one task of an in-process cluster, dropping what it held (a crash of it)."""
        self._s.stop_task(task_type, index)

    def start_task(self, task_type, index):
        self._s.start_task(task_type, index)

    def shutdown(self):
        self._s.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        return False

    def __repr__(self):
        kind = "in-process" if self._s.is_in_process else "connected"
        return f"pstrain.Cluster({kind}, ps={self.num_ps}, workers={self.num_workers})"
