#!/usr/bin/env python3
"""A job that follows its data (docs/online.md) beside the same job reading the same files as a
batch: what following costs in training speed (the limit: the batch job's examples/s on the same
rows, the same cluster, in the same run), and what progressive validation reports beside the
test AUC.

    bazel build -c opt //trainer:coordinator
    python3 bench/online_bench.py --bin $(bazel info -c opt bazel-bin) \\
        [--flights data/flights/flights.csv] [--files 40] [--rows_per_file 20000] [--rounds 2]

The files are tools/stream_files.sh's (a 1-in-30 sample of the whole table as the first file, then
the rest in order, --rows_per_file to a file; the first --files of them kept), all written before
the jobs start. The batch job
trains them for one epoch (its validation and test rows held out of every file); the following
job trains the first file's training rows and every later file's rows, and is stopped (SIGTERM)
once it has read every file and waits for more. Rounds alternate the two. Prints one JSON line
per job and one summary line: {"name": "online", "batch_examples_per_s", "follow_examples_per_s",
"ratio", ...} with medians over the rounds.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def summary_of(out):
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def run_batch(coordinator, spec, data, batch):
    p = subprocess.run([coordinator, "--model=tabular", "--feature_spec=" + spec, "--data=" + data,
                        "--epochs=1", "--batch_size=%d" % batch, "--checkpoint_dir=", "--logdir=",
                        "--validate_every_steps=1000000"],
                       capture_output=True, text=True, timeout=1800)
    s = summary_of(p.stdout)
    if p.returncode != 0 or s is None:
        sys.exit("batch job failed: " + p.stderr[-2000:])
    return s


def run_follow(coordinator, spec, data, batch, files):
    p = subprocess.Popen([coordinator, "--model=tabular", "--feature_spec=" + spec,
                          "--data=" + data, "--follow", "--batch_size=%d" % batch,
                          "--checkpoint_dir=", "--logdir=", "--validate_every_steps=1000000",
                          "--model_opt=follow_poll_seconds=0.05"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = re.compile(r"waiting for new data \((\d+) file")
    stderr = []
    for line in p.stderr:
        stderr.append(line)
        m = done.search(line)
        if m and int(m.group(1)) >= files:
            p.send_signal(signal.SIGTERM)
            break
    rest_out, rest_err = p.communicate(timeout=600)
    stderr.append(rest_err)
    s = summary_of(rest_out)
    if s is None:
        sys.exit("following job failed: " + "".join(stderr)[-2000:])
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="bazel-bin of an -c opt build")
    ap.add_argument("--flights", default="data/flights/flights.csv")
    ap.add_argument("--spec", default="models/tabular/specs/flights_ctr.json")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--rows_per_file", type=int, default=20000)
    ap.add_argument("--batch_size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    coordinator = os.path.join(args.bin, "trainer/coordinator")
    work = tempfile.mkdtemp(prefix="online_bench_")
    try:
        # The whole table as a stream (its first file a sample of every period: the test split is
        # by date), then the first --files files after it kept.
        data = os.path.join(work, "stream")
        subprocess.run(["bash", "tools/stream_files.sh", args.flights, data,
                        str(args.rows_per_file), "0"], check=True, capture_output=True)
        later = sorted(f for f in os.listdir(data) if f.endswith(".csv") and f != "000000.csv")
        for f in later[args.files:]:
            os.remove(os.path.join(data, f))
        files = min(args.files, len(later))
        batch_rates, follow_rates = [], []
        for r in range(args.rounds):
            for kind in (("batch", "follow") if r % 2 == 0 else ("follow", "batch")):
                if kind == "batch":
                    s = run_batch(coordinator, args.spec, data, args.batch_size)
                    batch_rates.append(s["examples_per_sec"])
                else:
                    s = run_follow(coordinator, args.spec, data, args.batch_size, files)
                    follow_rates.append(s["examples_per_sec"])
                print(json.dumps({"name": "online.job", "kind": kind, "round": r,
                                  "examples": s["examples"],
                                  "examples_per_s": round(s["examples_per_sec"], 1),
                                  "test_auc": round(s.get("test_auc", 0), 5),
                                  "progressive_auc": round(s.get("progressive_auc", 0), 5)}),
                      flush=True)
        b, f = statistics.median(batch_rates), statistics.median(follow_rates)
        print(json.dumps({"name": "online", "files": files, "rows_per_file": args.rows_per_file,
                          "cpus": os.cpu_count(), "batch_examples_per_s": round(b, 1),
                          "follow_examples_per_s": round(f, 1), "ratio": round(f / b, 3),
                          "batch_range": [round(min(batch_rates)), round(max(batch_rates))],
                          "follow_range": [round(min(follow_rates)), round(max(follow_rates))],
                          "detail": "same files, 2 workers and 2 ps in one process; medians"}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
