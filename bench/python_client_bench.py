#!/usr/bin/env python3
"""A Python training loop's lookups and gradient pushes through the pstrain module, beside the C++
client's (DynamicTable::Lookup / ApplyGradients called in a C++ loop over the same table and the
same batches, in the same process and run): the limit the Python figures are judged against.

    bazel run -c opt //bench:python_client_bench [-- --batch=4096 --rounds=5 --seconds=2]

Setup: an in-process cluster of 2 ps tasks (real gRPC servers and data planes on localhost, in
this process), a dynamic table of --keys keys x --dim floats (SGD; every key made first), and 64
batches of --batch keys drawn uniformly. Rounds alternate C++ then Python for each figure. Prints
one JSON line per figure: rows/s medians and ranges of each, and their ratio (target: >= 0.8),
then a line for the pstrain.torch Embedding step (forward, backward, push) and the async lookups
with 4 in flight, which have no C++ counterpart here.
"""

import argparse
import json
import statistics
import time

import numpy as np

import pstrain


def python_loop(op, table, batches, grads, seconds):
    n = 0
    start = time.perf_counter()
    while True:
        ids = batches[n % len(batches)]
        if op == "lookup":
            table.lookup(ids)
        else:
            table.apply_gradients(ids, grads)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n * batches.shape[1] / elapsed


def native_loop(op, table, batches, seconds):
    # Calibrate the iterations to about `seconds`, then time them.
    probe = max(1, int(table._t._time_native_loop(batches, op, 1) ** -1 * 0.2))
    t = table._t._time_native_loop(batches, op, probe)
    iterations = max(1, int(probe * seconds / t))
    t = table._t._time_native_loop(batches, op, iterations)
    return iterations * batches.shape[1] / t


def async_lookups(table, batches, seconds, in_flight=4):
    futures, n = [], 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        futures.append(table.lookup_async(batches[n % len(batches)]))
        n += 1
        if len(futures) >= in_flight:
            futures.pop(0).result()
    for f in futures:
        f.result()
    return n * batches.shape[1] / (time.perf_counter() - start)


def torch_steps(table, batches, seconds):
    import torch
    import pstrain.torch

    emb = pstrain.torch.Embedding(table)
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        emb(torch.from_numpy(batches[n % len(batches)])).sum().backward()
        n += 1
    emb.flush()
    return n * batches.shape[1] / (time.perf_counter() - start)


def summary(values):
    return {"median": round(statistics.median(values)), "min": round(min(values)),
            "max": round(max(values))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--keys", type=int, default=1 << 20)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()

    with pstrain.Cluster.in_process(workers=1, ps=2) as cluster:
        table = cluster.create_table("bench", dim=args.dim,
                                     optimizer={"kind": "sgd", "learning_rate": 0.01},
                                     initializer={"kind": "uniform", "minval": -0.1,
                                                  "maxval": 0.1})
        for start in range(0, args.keys, 1 << 16):
            table.lookup(np.arange(start, min(start + (1 << 16), args.keys)))
        rng = np.random.default_rng(1)
        batches = rng.integers(0, args.keys, (64, args.batch), dtype=np.int64)
        grads = np.full((args.batch, args.dim), 1e-3, np.float32)
        setup = {"batch": args.batch, "keys": args.keys, "dim": args.dim, "ps": 2,
                 "transport": "gRPC + the ps data plane over localhost TCP, servers in this "
                              "process", "rounds": args.rounds}
        for op in ("lookup", "apply"):
            native, python = [], []
            for _ in range(args.rounds):
                native.append(native_loop(op, table, batches, args.seconds))
                python.append(python_loop(op, table, batches, grads, args.seconds))
            ratios = [p / c for p, c in zip(python, native)]
            latency = {"cpp_client": round(args.batch / statistics.median(native) * 1e6),
                       "python": round(args.batch / statistics.median(python) * 1e6)}
            print(json.dumps(dict(setup, figure=f"sparse_{op}_rows_per_s",
                                  cpp_client=summary(native), python=summary(python),
                                  latency_us_at_median=latency,
                                  ratio_median=round(statistics.median(ratios), 3),
                                  ratio_range=[round(min(ratios), 3), round(max(ratios), 3)],
                                  target_ratio=0.8)), flush=True)
        print(json.dumps(dict(setup, figure="python_async_lookup_4_in_flight_rows_per_s",
                              python=summary([async_lookups(table, batches, args.seconds)
                                              for _ in range(args.rounds)]))), flush=True)
        print(json.dumps(dict(setup, figure="torch_embedding_step_rows_per_s",
                              python=summary([torch_steps(table, batches, args.seconds)
                                              for _ in range(args.rounds)]))), flush=True)


if __name__ == "__main__":
    main()
