"""Training jobs and export from Python (docs/python.md).

fit() runs the job's own binary, the coordinator (`bazel run //coordinator`), in a child process
with the same flags, and returns its one-line JSON summary as a dict: the same trainer, the same
checkpoints and resume, and a crash of the job never takes the Python process with it. Its
progress lines go to a Python callback. export() runs in this process.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading

from pstrain import _pstrain
from pstrain._errors import error

# trainer/progress.h's line: "step 1200/10000 (12.0%)  5234.1 ex/s  loss 0.4312  elapsed ..."
_PROGRESS = re.compile(
    r"^step (?P<step>\d+)(?:/(?P<total>\d+))?.*?(?P<rate>[0-9.]+) ex/s\s+loss (?P<loss>\S+)")


def coordinator_binary():
    """The coordinator binary fit() runs: $PSTRAIN_COORDINATOR, else the one installed with this
    package (pstrain/bin/coordinator), else the one beside it in Bazel's runfiles."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("PSTRAIN_COORDINATOR", ""),
                  os.path.join(here, "bin", "coordinator"),
                  os.path.join(here, "..", "..", "trainer", "coordinator")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.normpath(path)
    raise error("NOT_FOUND", "the coordinator binary: set PSTRAIN_COORDINATOR, or install the "
                 "package with `bazel run //python:install` (looked in: "
                 + ", ".join(p for p in candidates if p) + ")")


def _flag_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _cluster_spec_flag(cluster):
    from pstrain.cluster import Cluster  # the one import cycle: cluster does not need jobs
    if cluster is None:
        return None
    if isinstance(cluster, Cluster):
        return json.dumps(cluster.spec)
    if isinstance(cluster, dict):
        return json.dumps(cluster)
    return str(cluster)


def fit(model="tabular", data=None, feature_spec=None, cluster=None, progress=None,
        log=sys.stderr, **flags):
    """Trains `model` as `bazel run //coordinator -- --model=... --data=...` does, and returns
    the run's summary (TrainResult's JSON: steps, examples/s, the test metrics, ...) as a dict.

    data: the data file or directory; feature_spec: a path, or the spec itself as a dict (written
    to a temporary file); cluster: None (the job's default, an in-process cluster of its own),
    "in_process:workers=2,ps=2", a TF_CONFIG-style spec (dict, JSON or path), or a
    pstrain.Cluster (its tasks run the job; an in-process one in this process). progress: called
    with {"step", "total_steps", "examples_per_sec", "loss", "line"} for each progress line
    (at most once a second; set progress_interval="5s" for fewer). log: where the job's other
    lines go (None: nowhere). flags: any of the coordinator's flags (epochs=2, batch_size=512,
    checkpoint_dir=..., learning_rate=0.05, strategy="hybrid", ...).

    Raises pstrain.Error (code "INVALID_ARGUMENT" for a flag the coordinator refuses, "UNKNOWN"
    for a job that failed) with the job's error lines as its message. Ctrl-C stops the job as its
    own SIGINT does: between steps, with a final checkpoint, then KeyboardInterrupt."""
    args = [coordinator_binary(), f"--model={model}"]
    spec_file = None
    try:
        if data is not None:
            args.append(f"--data={os.fspath(data)}")
        if isinstance(feature_spec, dict):
            spec_file = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="pstrain-spec-",
                                                    delete=False)
            json.dump(feature_spec, spec_file)
            spec_file.close()
            args.append(f"--feature_spec={spec_file.name}")
        elif feature_spec is not None:
            args.append(f"--feature_spec={os.fspath(feature_spec)}")
        spec = _cluster_spec_flag(cluster)
        if spec is not None:
            args.append(f"--cluster_spec={spec}")
        if progress is not None:
            flags.setdefault("progress_interval", "1s")
        for name, value in flags.items():
            args.append(f"--{name}={_flag_value(value)}")
        return _run(args, progress, log)
    finally:
        if spec_file is not None:
            os.unlink(spec_file.name)


def _run(args, progress, log):
    errors, stdout_lines = [], []
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          bufsize=1) as child:
        out_reader = threading.Thread(target=lambda: stdout_lines.extend(child.stdout),
                                      daemon=True)
        out_reader.start()
        try:
            for line in child.stderr:
                line = line.rstrip("\n")
                match = _PROGRESS.match(line)
                if match and progress is not None:
                    total = match.group("total")
                    progress({"step": int(match.group("step")),
                              "total_steps": int(total) if total else None,
                              "examples_per_sec": float(match.group("rate")),
                              "loss": float(match.group("loss")), "line": line})
                    continue
                if line.startswith("error:") or line.startswith("ERROR:"):
                    errors.append(line.split(":", 1)[1].strip())
                if log is not None:
                    print(line, file=log)
            returncode = child.wait()
        except BaseException:
            # Ctrl-C (or an error in the callback): the job stops as its own SIGINT stops it,
            # between steps, with a final checkpoint.
            child.send_signal(signal.SIGINT)
            child.wait()
            raise
        finally:
            out_reader.join()
    summary = next((l for l in reversed(stdout_lines) if l.startswith("{")), None)
    if returncode != 0 or summary is None:
        message = "; ".join(errors) or f"the job exited with status {returncode}"
        code = "INVALID_ARGUMENT" if returncode == 1 and "flag" in message else "UNKNOWN"
        raise error(code, message)
    return json.loads(summary)


def export(checkpoint, out, overwrite=False, min_count=0, top_k=0, table_format=""):
    """Exports a checkpoint (or a checkpoint directory's best, else latest) of a model trained by
    fit() into a self-contained model directory `out` for pstrain.Predictor and the prediction
    server (serving/export.h). Returns {"checkpoint", "model", "step", "bytes", "seconds"}."""
    return _pstrain.export_model(os.fspath(checkpoint), os.fspath(out), overwrite, min_count,
                                 top_k, table_format)
