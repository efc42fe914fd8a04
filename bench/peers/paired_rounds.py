#!/usr/bin/env python3
"""ps_bench beside its ps-lite peer in paired rounds: each round runs the two back to back (which
goes first alternates), so both see the machine in the same state, and each figure's ratio is
taken round by round. On a shared VM whose speed drifts by +-20% between minutes, the median of
paired ratios says more than the ratio of two medians taken far apart.

    python3 bench/peers/paired_rounds.py --ps_bench=PATH --pslite=DIR [--rounds=8]
        [--in_flight=1,4] [--only=sparse_pull,sparse_push,dense]

--ps_bench: a built ps_bench (`bazel build -c opt //bench:ps_bench`, then bazel-bin/bench/ps_bench);
--pslite: a ps-lite checkout, as bench/peers/run_pslite.sh takes it. Both get the same sorted
requests (ps_bench --sorted_ids) and the same in-flight counts. ps_bench's raw dense figures run at
the second in-flight count only (so dense at 4 needs --in_flight=1,4).

Prints one JSON line per pair of figures measured in every round: the medians of each side, and
the median, least and greatest of the per-round ratios. Adagrad pushes are set beside both of the
peer's pushes: its sum (SGD, one row per key) and its Adagrad (the same update as ours).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def pairs(n):
    """(our figure, the peer's figure) for n requests in flight."""
    dense = "raw" if n > 1 else "sharded_variable"
    return [
        (f"sparse_pull.raw.in_flight_{n}", f"pslite.sparse_pull.in_flight_{n}"),
        (f"sparse_push_sgd.raw.in_flight_{n}", f"pslite.sparse_push_sgd.in_flight_{n}"),
        (f"sparse_push.raw.in_flight_{n}", f"pslite.sparse_push_adagrad.in_flight_{n}"),
        (f"sparse_push.raw.in_flight_{n}", f"pslite.sparse_push_sgd.in_flight_{n}"),
        (f"dense_pull.dense.{dense}.in_flight_{n}", f"pslite.dense_pull.in_flight_{n}"),
        (f"dense_push_sgd.dense.{dense}.in_flight_{n}", f"pslite.dense_push_sgd.in_flight_{n}"),
    ]


def figures(command):
    """Runs `command`; its JSON lines' values by name. Exits naming the command if it fails."""
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"paired_rounds: {' '.join(command)} failed ({done.returncode}):\n"
                 f"{done.stderr[-2000:]}")
    out = {}
    for line in done.stdout.splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if isinstance(j, dict) and isinstance(j.get("name"), str) and "value" in j:
            out[j["name"]] = j["value"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ps_bench", required=True)
    parser.add_argument("--pslite", required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--in_flight", default="1,4")
    parser.add_argument("--only", default="sparse_pull,sparse_push,dense")
    args = parser.parse_args()
    if not os.access(args.ps_bench, os.X_OK):
        sys.exit(f"paired_rounds: --ps_bench={args.ps_bench} is not an executable")
    try:
        in_flight = [int(n) for n in args.in_flight.split(",")]
    except ValueError:
        sys.exit(f"paired_rounds: --in_flight={args.in_flight} is not a list of counts")
    if args.rounds < 1 or not in_flight or min(in_flight) < 1:
        sys.exit("paired_rounds: --rounds and every --in_flight count must be at least 1")

    ours_cmd = [args.ps_bench, "--sorted_ids", f"--in_flight={args.in_flight}",
                f"--only={args.only}"]
    peer_cmd = ["bash", os.path.join(HERE, "run_pslite.sh"), f"--pslite={args.pslite}",
                "--prefetch=1", f"--in_flight={args.in_flight}"]
    rounds = []
    for r in range(args.rounds):
        if r % 2 == 0:
            ours, peer = figures(ours_cmd), figures(peer_cmd)
        else:
            peer, ours = figures(peer_cmd), figures(ours_cmd)
        rounds.append((ours, peer))

    for n in in_flight:
        for mine, theirs in pairs(n):
            got = [(o[mine], p[theirs]) for o, p in rounds if mine in o and theirs in p]
            if len(got) < len(rounds) or any(p <= 0 for _, p in got):
                continue  # not measured in every round (not asked for, or not at this count)
            ratios = [o / p for o, p in got]
            print(json.dumps({
                "name": f"paired.{mine}.vs.{theirs}",
                "rounds": len(got),
                "ours_median": statistics.median(o for o, _ in got),
                "peer_median": statistics.median(p for _, p in got),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "ratios": ratios,
                "ids": "distinct, sorted (ps_bench --sorted_ids)",
                "order": "back to back in each round, which goes first alternating",
            }), flush=True)


if __name__ == "__main__":
    main()
