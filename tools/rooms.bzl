# The rooms of the repository, lowest first (docs/architecture.md, "Rooms, lowest first", says what
# lives in each): a room may use its own code and the rooms listed before it, never those after it.
# The one place this order is kept: tools/check_layering.py checks every #include against it
# (//tools:layering_test, in the suite), the root BUILD.bazel makes from it the visibility of each
# room's targets (room_package_groups), and tools/check_docs.py checks that a page of docs/
# describes every room (//tools:docs_test).
ROOMS = [
    "proto",  # the wire: service and checkpoint messages
    "common",  # status macros, logging, tensors, thread pool, CRC-32C, wire-format helpers
    "cluster",  # what every task shares: cluster spec, ports, task identity, task main, health checks
    "partitioners",  # TF's partitioners, row splits, id routing, placement, the plan tool
    "ps",  # shards, optimizers, the ps service and binary, the client handles
    "collective",  # all-reduce, broadcast, all-gather across workers (Gloo, NCCL), the rendezvous
    "worker",  # closure registry, the worker service, device/ (CPU and CUDA math)
    "coordinator",  # ClusterCoordinator, variable creation, checkpoints, the in-process cluster
    "models",  # the Model interface, the example models and their data readers
    "serving",  # export of a trained model, the Predictor, the prediction server and tools
    "trainer",  # the trainer, progress line and TensorBoard files, the job's binaries
    "python",  # the pstrain Python module: clusters, tables, PyTorch modules, jobs, the Predictor
]

# Above every room: cross-room tests (the only test code among them), benchmarks, scripts.
TOP = ["tests", "bench", "tools"]

def room_package_groups():
    """package_group `<room>_and_above` for each room: the packages that may depend on it."""
    for i, room in enumerate(ROOMS):
        native.package_group(
            name = room + "_and_above",
            packages = ["//%s/..." % r for r in ROOMS[i:] + TOP],
        )
