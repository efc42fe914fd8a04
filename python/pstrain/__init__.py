"""pstrain from Python: clusters, dynamic tables and variables on ps tasks, PyTorch modules whose
rows live there, training jobs, export and the Predictor. See docs/python.md.

    import numpy as np, pstrain
    cluster = pstrain.Cluster.in_process(workers=1, ps=2)
    emb = cluster.create_table("emb", dim=8, optimizer={"kind": "adagrad", "learning_rate": 0.05})
    rows = emb.lookup(np.array([3, 14, 15]))          # (3, 8) float32
    emb.apply_gradients(np.array([3, 14, 15]), np.ones((3, 8), np.float32))
    cluster.save("/tmp/ckpt", step=1)

The C++ core is the extension `pstrain._pstrain`; every call that reaches a ps releases the GIL,
and errors are `pstrain.Error` with the C++ status `code` ("NOT_FOUND") and `message`.
"""

from pstrain._pstrain import Error, Future
from pstrain.cluster import Cluster, Table, Variable
from pstrain.jobs import export, fit
from pstrain.serving import Predictor

__all__ = [
    "Cluster",
    "Error",
    "Future",
    "Predictor",
    "Table",
    "Variable",
    "export",
    "fit",
]
