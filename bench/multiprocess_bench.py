#!/usr/bin/env python3
"""A job of separate processes on this machine, timed and scored: the parameter-server strategy
(ps_server and worker_server processes, the coordinator as the chief) or the hybrid strategy (ps
processes, and every worker a coordinator process with its task), as bench/async_accuracy_bench
trains them in one process. It answers what the in-process figures can't: the same training with
every task behind its own sockets and address space.

    python3 bench/multiprocess_bench.py --bin $(bazel info -c opt bazel-bin) --workers 2 \\
        [--strategy parameter_server|hybrid] [--seed 1] [--dense_turns 1] \\
        (--click_dir /tmp/pstrain_click_log | --flights data/flights/flights.csv)

With --kill_after S (the parameter-server strategy, 3 workers or more): S seconds into training,
worker 1 is SIGKILLed and started again and worker 2 SIGKILLed for good; S/2 later, ps 1 is
SIGKILLed and started again (its shards reloaded from the latest checkpoint: give
--extra=--checkpoint_every_steps=N). --extra passes more flags to the coordinator (e.g.
--extra=--model_opt=deal_splits=false for fixed shares of the data).

Build first: bazel build -c opt //ps:ps_server //trainer:worker_server //trainer:coordinator.
The click log (its files and click_spec.json) is the one bench/async_accuracy_bench writes to
its --dir. Prints one JSON line: {"name": "multiprocess", "strategy", "workers", "ps", "seed",
"dataset", "test_auc", "test_logloss", "examples_per_s", "train_seconds"} from the chief's (or
worker 0's) summary, or {"name": "multiprocess", "error": ...} with the last lines of the failed
task's log. Every process it starts is stopped when it ends.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("localhost", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def last_lines(path, n=8):
    try:
        with open(path) as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True, help="bazel-bin of an opt build")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--strategy", default="parameter_server",
                   choices=["parameter_server", "hybrid"])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dense_turns", type=int, default=None,
                   help="passed to the coordinator when given (a build without it refuses it)")
    p.add_argument("--click_dir", default="")
    p.add_argument("--flights", default="")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--kill_after", type=float, default=0,
                   help="seconds: kill workers 1 (restarted) and 2 (for good), then ps 1")
    p.add_argument("--extra", action="append", default=[],
                   help="a flag for the coordinator (repeat for more)")
    a = p.parse_args()
    if bool(a.click_dir) == bool(a.flights):
        print(json.dumps({"name": "multiprocess", "error": "give --click_dir or --flights"}))
        return 2
    a.bin = os.path.abspath(a.bin)
    if a.click_dir:
        a.click_dir = os.path.abspath(a.click_dir)
        dataset = "click"
        model = ["--model=tabular",
                 "--feature_spec=" + os.path.join(a.click_dir, "click_spec.json"),
                 "--data=" + os.path.join(a.click_dir, "click_train.csv")]
    else:
        dataset = "flights"
        model = ["--model=flights_ctr", "--data=" + os.path.abspath(a.flights)]
    run_dir = tempfile.mkdtemp(prefix="pstrain_mp.")
    # Each run its own checkpoints (the default directory is relative: a second run there would
    # restore the first's finished job).
    common = model + ["--epochs=1", "--seed=%d" % a.seed,
                      "--checkpoint_dir=" + os.path.join(run_dir, "checkpoints")]
    if a.dense_turns is not None:
        common.append("--dense_turns=%d" % a.dense_turns)
    common += a.extra
    if a.kill_after > 0 and (a.strategy != "parameter_server" or a.workers < 3):
        print(json.dumps({"name": "multiprocess",
                          "error": "--kill_after needs the parameter-server strategy, 3 workers"}))
        return 2

    hybrid = a.strategy == "hybrid"
    ports = free_ports(a.ps + a.workers + 1)
    ps_addrs = ["localhost:%d" % ports[i] for i in range(a.ps)]
    worker_addrs = ["localhost:%d" % ports[a.ps + i] for i in range(a.workers)]
    cluster = {"ps": ps_addrs, "worker": worker_addrs}
    if not hybrid:
        cluster["chief"] = ["localhost:%d" % ports[-1]]
    spec = os.path.join(run_dir, "cluster.json")
    with open(spec, "w") as f:
        json.dump({"cluster": cluster}, f)

    procs = []  # (name, Popen, log)
    argvs = {}
    def start(name, argv):
        log = os.path.join(run_dir, name + ".log")
        argvs[name] = argv
        procs.append((name, subprocess.Popen(argv, stdout=open(log, "a"), stderr=subprocess.STDOUT,
                                             cwd=run_dir, start_new_session=True), log))

    def kill(name, restart):
        for n, proc, _ in procs:
            if n == name and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if restart:
            start(name, argvs[name])

    def stop_all():
        for _, proc, _ in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc, _ in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    try:
        for i in range(a.ps):
            start("ps%d" % i, [os.path.join(a.bin, "ps/ps_server"), "--cluster_spec=" + spec,
                               "--task=ps:%d" % i, "--bind_host=localhost",
                               "--checkpoint_root=" + run_dir])
        summary_from = None
        if hybrid:
            for i in range(a.workers):
                start("worker%d" % i, [os.path.join(a.bin, "trainer/coordinator"),
                                       "--cluster_spec=" + spec, "--task=worker:%d" % i,
                                       "--strategy=hybrid", "--bind_host=localhost"] + common)
            summary_from = "worker0"
        else:
            for i in range(a.workers):
                start("worker%d" % i, [os.path.join(a.bin, "trainer/worker_server"),
                                       "--cluster_spec=" + spec, "--task=worker:%d" % i,
                                       "--bind_host=localhost"])
            start("chief", [os.path.join(a.bin, "trainer/coordinator"), "--cluster_spec=" + spec]
                  + common)
            summary_from = "chief"
        drivers = [(n, pr, lg) for n, pr, lg in procs if n == summary_from or
                   (hybrid and n.startswith("worker"))]
        deadline = time.time() + a.timeout
        if a.kill_after > 0:
            # Training starts once the chief has scanned the data and set up: its first progress
            # line ("step ") marks it.
            chief_log = dict((n, lg) for n, _, lg in procs)["chief"]
            while time.time() < deadline and drivers[0][1].poll() is None:
                with open(chief_log) as f:
                    if "step " in f.read():
                        break
                time.sleep(0.05)
            time.sleep(a.kill_after)
            kill("worker1", restart=True)
            kill("worker2", restart=False)
            time.sleep(a.kill_after / 2)
            kill("ps1", restart=True)
        for name, proc, log in drivers:
            rc = proc.wait(timeout=max(1, deadline - time.time()))
            if rc != 0:
                print(json.dumps({"name": "multiprocess", "error": "%s exited with %d" % (name, rc),
                                  "log": last_lines(log)}))
                return 1
        log = dict((n, lg) for n, _, lg in procs)[summary_from]
        summary = None
        with open(log) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{") and "examples_per_sec" in line:
                    summary = json.loads(line)
        if summary is None:
            print(json.dumps({"name": "multiprocess", "error": "no summary line",
                              "log": last_lines(log)}))
            return 1
        print(json.dumps({"name": "multiprocess", "strategy": a.strategy, "workers": a.workers,
                          "ps": a.ps, "seed": a.seed, "dataset": dataset,
                          "test_auc": summary.get("test_auc"),
                          "test_logloss": summary.get("test_logloss"),
                          "examples_per_s": summary.get("examples_per_sec"),
                          "train_seconds": summary.get("train_seconds")}))
        return 0
    except subprocess.TimeoutExpired:
        print(json.dumps({"name": "multiprocess", "error": "timed out after %gs" % a.timeout}))
        return 1
    finally:
        stop_all()
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
