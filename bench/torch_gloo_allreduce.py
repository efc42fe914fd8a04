#!/usr/bin/env python3
"""The peer for bench/collective_bench: torch.distributed's Gloo all_reduce (SUM, float32) on
loopback, one process per rank, at the sizes and iteration counts collective_bench passes.

    python3 bench/torch_gloo_allreduce.py --world_size 2 --sizes 4096:1000,1048576:50

Prints one JSON line per size: {"world_size", "bytes", "iters", "seconds_per_op"} (rank 0's
time per all_reduce over the timed iterations, after two untimed ones and a barrier). Needs
Debian's python3-torch; a benchmark-only peer, never a dependency of the product.
"""
import argparse
import json
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, world_size, port, sizes, queue):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    for nbytes, iters in sizes:
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        elapsed = time.perf_counter() - start
        if rank == 0:
            queue.put({"world_size": world_size, "bytes": nbytes, "iters": iters,
                       "seconds_per_op": elapsed / iters})
        dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world_size", type=int, required=True)
    parser.add_argument("--sizes", required=True, help="bytes:iters,bytes:iters,...")
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in item.split(":")) for item in args.sizes.split(",")]
    try:
        import torch.multiprocessing as mp
    except ImportError as e:
        print(json.dumps({"error": f"torch is not installed: {e}"}))
        return 1
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=run, args=(r, args.world_size, port, sizes, queue))
             for r in range(args.world_size)]
    for p in procs:
        p.start()
    for _ in sizes:
        print(json.dumps(queue.get()), flush=True)
    for p in procs:
        p.join()
    return max(p.exitcode for p in procs)


if __name__ == "__main__":
    sys.exit(main())
