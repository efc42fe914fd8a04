#!/usr/bin/env python3
"""A DLRM-style click model in plain PyTorch whose embedding table lives on pstrain's ps tasks,
trained by several Python worker processes; beside it the same model all in one PyTorch process,
and (with --cpp) pstrain's C++ tabular model on the same rows. See docs/python.md.

    /usr/bin/python3 python/examples/dlrm_example.py [--workers 2] [--ps 2] [--train_rows 400000]
        [--test_rows 100000] [--epochs 1] [--batch_size 512] [--peer] [--cpp]

The data is click_data.py's synthetic log, whose true probabilities give the best possible AUC.
The launcher starts an in-process cluster of `--ps` ps tasks and creates the table "emb" (every
field's ids, salted apart) with Adagrad; each worker process connects to it, trains on its slice
of the rows with pstrain.torch.Embedding, and all-reduces the dense part's gradients with
torch.distributed's Gloo (DistributedDataParallel: the hybrid strategy, in Python). Worker 0 then
scores the held-out rows with evaluation lookups. Prints one JSON line:
{"best_auc", "pstrain": {...}, "torch_one_process": {...} (--peer), "cpp_tabular": {...} (--cpp)}.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import click_data  # noqa: E402

DIM = 16
# Each field's ids are salted apart in the one table: field f's id v is OFFSETS[f] + v.
OFFSETS = np.cumsum((0,) + click_data.CARDINALITIES[:-1]).astype(np.int64)
TABLE_OPTIMIZER = {"kind": "adagrad", "learning_rate": 0.5, "initial_accumulator_value": 0.1,
                   "epsilon": 1e-7}
INIT_STDDEV = 0.05
DENSE_LR = 3e-3


class DLRM(nn.Module):
    """Bottom MLP over the numeric fields, the fields' embeddings, their pairwise dot products
    (with the bottom MLP's output), and a top MLP over them: DLRM's shape (Naumov et al. 2019)."""

    def __init__(self, embedding, num_sparse=click_data.NUM_SPARSE,
                 num_dense=click_data.NUM_DENSE, dim=DIM):
        super().__init__()
        self.embedding = embedding  # ids (B, F) -> (B, F, dim)
        self.bottom = nn.Sequential(nn.Linear(num_dense, 32), nn.ReLU(), nn.Linear(32, dim),
                                    nn.ReLU())
        n = num_sparse + 1
        self.register_buffer("pairs", torch.triu_indices(n, n, 1), persistent=False)
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 64), nn.ReLU(),
                                 nn.Linear(64, 1))

    def forward(self, sparse, dense):
        x = self.bottom(dense)
        z = torch.cat([x.unsqueeze(1), self.embedding(sparse)], dim=1)
        interactions = torch.bmm(z, z.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, interactions], dim=1)).squeeze(1)


def salted(sparse):
    return sparse + OFFSETS


def batches(data, batch_size, rows):
    for start in range(0, len(rows) - batch_size + 1, batch_size):
        r = rows[start:start + batch_size]
        yield (torch.from_numpy(salted(data["sparse"][r])), torch.from_numpy(data["dense"][r]),
               torch.from_numpy(data["label"][r]))


def score(model, data, batch_size=4096):
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(data["label"]), batch_size):
            s = slice(start, start + batch_size)
            out.append(torch.sigmoid(model(torch.from_numpy(salted(data["sparse"][s])),
                                           torch.from_numpy(data["dense"][s]))).numpy())
    return float(click_data.auc(data["label"], np.concatenate(out)))


def worker(rank, args, spec, port, results):
    import pstrain
    import pstrain.torch
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # every worker starts from the same dense weights
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.workers)
    cluster = pstrain.Cluster.connect(spec)
    embedding = pstrain.torch.Embedding(cluster.table("emb"))
    model = DLRM(embedding)
    dense = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=DENSE_LR)
    loss_fn = nn.BCEWithLogitsLoss()
    train = click_data.make_click_log(args.train_rows, seed=args.seed)
    per_worker = args.train_rows // args.workers
    dist.barrier()
    started = time.perf_counter()
    examples = 0
    for epoch in range(args.epochs):
        order = np.random.default_rng(args.seed + epoch).permutation(args.train_rows)
        mine = order[rank * per_worker:(rank + 1) * per_worker]
        for sparse, dense_x, label in batches(train, args.batch_size, mine):
            embedding.step += 1
            loss = loss_fn(dense(sparse, dense_x), label)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            examples += len(label)
    embedding.flush()
    dist.barrier()
    seconds = time.perf_counter() - started
    result = {"rank": rank, "examples": examples, "seconds": seconds}
    if rank == 0:
        test = click_data.make_click_log(args.test_rows, seed=args.seed + 1000)
        result["test_auc"] = score(model, test)
    results.put(result)
    dist.destroy_process_group()


def run_pstrain(args):
    import pstrain
    import socket

    with pstrain.Cluster.in_process(workers=1, ps=args.ps) as cluster:
        cluster.create_table("emb", dim=DIM, optimizer=TABLE_OPTIMIZER,
                             initializer={"kind": "normal", "stddev": INIT_STDDEV,
                                          "seed": args.seed})
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        context = mp.get_context("spawn")
        results = context.Queue()
        procs = [context.Process(target=worker, args=(r, args, cluster.spec, port, results))
                 for r in range(args.workers)]
        for p in procs:
            p.start()
        out = [results.get() for _ in procs]
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise RuntimeError(f"a worker process exited with {p.exitcode}")
    examples = sum(r["examples"] for r in out)
    seconds = max(r["seconds"] for r in out)
    auc = next(r["test_auc"] for r in out if r["rank"] == 0)
    return {"test_auc": round(auc, 5), "examples_per_s": round(examples / seconds),
            "workers": args.workers, "ps": args.ps, "examples": examples}


def run_torch_peer(args):
    """The same model, data, optimizers and batches, all in this process: the table is a
    torch.nn.Embedding with sparse gradients and torch's Adagrad."""
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    table = nn.Embedding(int(sum(click_data.CARDINALITIES)), DIM, sparse=True)
    nn.init.normal_(table.weight, 0, INIT_STDDEV)
    model = DLRM(table)
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("embedding.")]
    dense_opt = torch.optim.Adam(dense_params, lr=DENSE_LR)
    table_opt = torch.optim.Adagrad(table.parameters(), lr=TABLE_OPTIMIZER["learning_rate"],
                                    initial_accumulator_value=0.1, eps=1e-7)
    loss_fn = nn.BCEWithLogitsLoss()
    train = click_data.make_click_log(args.train_rows, seed=args.seed)
    started = time.perf_counter()
    examples = 0
    for epoch in range(args.epochs):
        order = np.random.default_rng(args.seed + epoch).permutation(args.train_rows)
        for sparse, dense_x, label in batches(train, args.batch_size, order):
            loss = loss_fn(model(sparse, dense_x), label)
            dense_opt.zero_grad()
            table_opt.zero_grad()
            loss.backward()
            dense_opt.step()
            table_opt.step()
            examples += len(label)
    seconds = time.perf_counter() - started
    test = click_data.make_click_log(args.test_rows, seed=args.seed + 1000)
    return {"test_auc": round(score(model, test), 5), "examples_per_s": round(examples / seconds),
            "examples": examples}


def run_cpp(args):
    """pstrain's C++ tabular model (its default wide & deep) on the same rows, through
    pstrain.fit."""
    import pstrain

    train = click_data.make_click_log(args.train_rows, seed=args.seed)
    test = click_data.make_click_log(args.test_rows, seed=args.seed + 1000)
    with tempfile.TemporaryDirectory() as tmp:
        click_data.write_csv(train, os.path.join(tmp, "train.csv"))
        click_data.write_csv(test, os.path.join(tmp, "test.csv"))
        summary = pstrain.fit(model="tabular", data=os.path.join(tmp, "train.csv"),
                              feature_spec=click_data.feature_spec(os.path.join(tmp, "test.csv")),
                              cluster=f"in_process:workers={args.workers},ps={args.ps}",
                              epochs=args.epochs, batch_size=args.batch_size,
                              validation_fraction=0, checkpoint_dir="", logdir="",
                              seed=args.seed, log=None)
    return {"test_auc": round(summary["test_auc"], 5),
            "examples_per_s": round(summary["examples_per_sec"])}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--train_rows", type=int, default=400000)
    parser.add_argument("--test_rows", type=int, default=100000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--peer", action="store_true", help="also train the one-process peer")
    parser.add_argument("--cpp", action="store_true", help="also train the C++ tabular model")
    args = parser.parse_args(argv)
    test = click_data.make_click_log(args.test_rows, seed=args.seed + 1000)
    out = {"best_auc": round(float(click_data.auc(test["label"], test["p"])), 5),
           "train_rows": args.train_rows, "epochs": args.epochs, "batch_size": args.batch_size,
           "pstrain": run_pstrain(args)}
    if args.peer:
        out["torch_one_process"] = run_torch_peer(args)
    if args.cpp:
        out["cpp_tabular"] = run_cpp(args)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
