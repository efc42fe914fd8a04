#!/usr/bin/env python3
"""The peer for bench/async_accuracy_bench's "sync" runs: the tabular model (models/tabular/) on a
CSV and its feature spec, trained by PyTorch in one process, synchronously, and scored as the
C++ scores it.

    /usr/bin/python3 bench/torch_tabular_peer.py --spec /tmp/pstrain_click_log/click_spec.json \
        --train /tmp/pstrain_click_log/click_train.csv [--test FILE] [--epochs 1] \
        [--batch_size 256] [--seed 1] [--threads 1] [--validation_fraction 0.1]

Prints one JSON line: {"name": "torch_peer", "test_auc", "test_auc_exact", "test_logloss",
"examples_per_s", "train_seconds", "train_rows", "validation_rows", "test_rows", "steps", "seed",
"threads"}. test_auc is the C++'s: the AUC of two 8192-bin histograms of the predicted
probability, one per label, pairs in one bin counting half (kEvalBins, HistogramAuc in
tabular_model.cc); test_auc_exact is sklearn's roc_auc_score of the same predictions.
examples_per_s and train_seconds time the training loop only (steps x batch_size examples),
not the reading, the transforms or the scoring. Needs Debian's python3-torch, python3-pandas and
python3-sklearn (run it with /usr/bin/python3); a benchmark-only peer, never a dependency of the
product.

What it does as the C++ does (the files it follows in brackets):
  split      a row of the data file is validation when UnitOf(RowHash(seed, kValidationSalt,
             file 0, its line)) < validation_fraction, the line counted from the header's 1; the
             test rows are the spec's split.test_data file (or --test), else the spec's test
             column or seeded test_fraction, hashed the same way [data_plan.cc SplitOf]; the
             peer trains on exactly the C++'s training rows
  transforms bucketize: boundaries sorted[k * n / q] for k = 1 .. q - 1 over the training rows'
             non-missing values, kept when strictly above the last; bucket = number of
             boundaries <= x; a missing value ("" or the spec's missing_values) its own key
             [data_plan.cc FinishFeatureStats, transforms.cc]; categorical: one key per
             (feature, text), missing its own key; standardize: training mean and population
             stddev (1 if 0), missing 0
  tables     one table of all features' keys (the C++'s dynamic tables: no collisions), rows
             made for the training rows' keys; embeddings truncated normal (2 sd) of
             init_stddev 0.01, wide and baseline rows zeros; a key training never had reads
             zeros at test (an evaluation lookup's default row) [tabular_model.cc
             CreateVariables, ps/dynamic_shard.h]
  net        deep input = the features' embeddings concatenated in spec order, then the dense
             inputs; hidden layers ReLU; a linear output (He-normal hidden weights, 1/sqrt(fan_in)
             for the output, truncated at 2 sd; biases 0, the output bias the training prior
             logit); wide = bias (0 in wide & deep) + the features' wide rows + dense inputs x
             weights; logit = deep + wide; a wide baseline beside it (its bias at the prior),
             trained on the same batches, not in the score [tabular_net.cc, tabular_model.cc]
  loss       binary cross-entropy with logits. The table rows (embedding, wide, baseline) take
             the gradient of the batch's summed loss, repeated keys summed into one row gradient
             and one step per distinct row; the dense weights and biases that of the mean loss
             [tabular_net.h, ps/variable_shard.cc ApplySparseGradient]
  optimizer  Adagrad as TF's ApplyAdagradV2: accum += g^2; w -= lr g / (sqrt(accum) + 1e-7),
             accum starting at 0.1 [ps/optimizers.cc]; rates: the spec's, else the dense layers
             0.2 and the embeddings, wide rows and biases DefaultSparseRate = 0.05 * min(1, 16 /
             features) (0.0205 for the click log's 39 features) [feature_spec.cc]
  order      batches cut every batch_size from one shuffled pass of the training rows after
             another, so the last batch of an epoch is filled from the next pass's order (the
             C++'s cached stream, example_stream.cc); steps = ceil(train rows / batch_size) x
             epochs [tabular_model.cc]
  scoring    test log loss: mean BCE of the logits (double); test AUC: as above

Where it knowingly differs:
  - the draws: the initial embeddings and dense weights come from torch's generator (seeded by
    --seed), not the ps's per-key / per-element SplitMix64 streams, and the shuffle is torch's
    permutation, not std::shuffle with mt19937_64: the same distributions and the same rows per
    epoch, not the same numbers or the same order;
  - quantiles: the C++ samples at most 100,000 values per feature (a reservoir drawn with
    mt19937_64); the peer uses every training value, the same as the C++ up to 100,000 non-missing
    training values per feature, else boundaries of another sample;
  - float arithmetic: the sums run in another order (torch's matmuls, index_add), so the
    trajectories part by rounding;
  - covers the specs the click log and similar data need: single-valued categorical and numeric
    features, binary labels, Adagrad, model type wide / deep / wide_and_deep without
    interaction; one data file (not a directory or glob); anything else is refused (multi-valued,
    datetime, cross, min_count, unknown_fraction, dot interaction, other tasks or optimizers,
    learning-rate schedules).
"""
import argparse
import json
import math
import sys
import time

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
TEST_SALT = 0x7E57000000000001       # data_plan.cc kTestSalt
VALIDATION_SALT = 0x7A11DA7E00000002  # data_plan.cc kValidationSalt
EVAL_BINS = 8192                      # tabular_model_worker.h kEvalBins
DEFAULT_MISSING = ["NA", "N/A", "NaN", "nan", "null", "NULL", "?"]


def splitmix64(np, x):
    """SplitMix64's finalizer of x + gamma (common/splitmix64.h), on a uint64 array."""
    x = x + np.uint64(GAMMA)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_units(np, seed, salt, file_index, lines):
    """UnitOf(RowHash(seed, salt, file_index, line)) per line (transforms.cc)."""
    with np.errstate(over="ignore"):
        a = splitmix64(np, np.array([(seed ^ salt) & M64], dtype=np.uint64))
        b = splitmix64(np, np.uint64((file_index * GAMMA) & M64) + lines.astype(np.uint64))
        h = splitmix64(np, a ^ b)
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def fail(what):
    print(json.dumps({"name": "torch_peer", "error": what}), flush=True)
    sys.exit(2)


class Spec:
    """The parts of a feature spec (models/tabular/feature_spec.h) the peer covers."""

    def __init__(self, path):
        with open(path) as f:
            j = json.load(f)
        self.path = path
        label = j["label"]
        self.label = label["column"]
        if label.get("task", "binary") != "binary":
            fail(f"{path}: only binary labels (task {label['task']})")
        self.positive = [str(v) for v in label.get("positive", [])]
        self.negative = [str(v) for v in label.get("negative", [])]
        self.threshold = label.get("threshold")
        self.delimiter = j.get("delimiter", ",")
        if self.delimiter in ("\\t", "tab"):
            self.delimiter = "\t"
        self.missing = set(j.get("missing_values", DEFAULT_MISSING)) | {""}
        self.features = []
        for i, fj in enumerate(j["features"]):
            kind = fj.get("type", "categorical")
            where = f"{path}: features[{i}]"
            if kind not in ("categorical", "numeric"):
                fail(f"{where}: type {kind} is not covered")
            for key in ("separator", "min_count", "unknown_fraction"):
                if fj.get(key):
                    fail(f"{where}: {key} is not covered")
            f = {"name": fj["name"], "type": kind, "column": fj["column"]}
            if kind == "numeric":
                f["transform"] = fj.get("transform", "standardize")
                f["boundaries"] = list(fj.get("boundaries", []))
                f["quantiles"] = int(fj.get("quantiles", 0))
            f["embedded"] = kind != "numeric" or f["transform"] == "bucketize"
            self.features.append(f)
        split = j.get("split", {})
        self.test_data = split.get("test_data", "")
        self.test_fraction = split.get("test_fraction", 0.2)
        test = split.get("test", {})
        self.test_column, self.test_at_least = test.get("column", ""), test.get("at_least", "")
        model = j.get("model", {})
        self.type = model.get("type", "deep")
        if model.get("interaction", "none") != "none":
            fail(f"{path}: model.interaction is not covered")
        self.dim = int(model.get("embedding_dim", 16))
        self.hidden = [int(w) for w in model.get("hidden", [64])]
        self.init_stddev = float(model.get("init_stddev", 0.01))
        sparse_rate = 0.05 * min(1.0, 16.0 / max(len(self.features), 1))  # DefaultSparseRate
        defaults = {"embeddings": sparse_rate, "wide": sparse_rate, "dense": 0.2}
        self.opt = {}
        for part, rate in defaults.items():
            given = model.get("optimizers", {}).get(part)
            o = {"lr": rate, "accum": 0.1, "eps": 1e-7}
            if given is not None:
                if given.get("kind", "adagrad") != "adagrad" or "schedule" in given:
                    fail(f"{path}: model.optimizers.{part}: only Adagrad without a schedule")
                o["lr"] = float(given.get("learning_rate", 0.05))
                o["accum"] = float(given.get("initial_accumulator_value", 0.1))
                o["eps"] = float(given.get("epsilon", 1e-7))
            self.opt[part] = o


def read_csv(pd, path, spec):
    return pd.read_csv(path, sep=spec.delimiter, dtype=str, keep_default_na=False,
                       na_filter=False, engine="c")


def labels_of(np, pd, spec, column):
    text = column.str.strip()
    if spec.threshold is not None:
        return (text.astype(np.float64) > spec.threshold).astype(np.float32).to_numpy()
    if spec.positive:
        pos, neg = text.isin(spec.positive), text.isin(spec.negative)
        if not (pos | neg).all():
            fail(f"label column {spec.label}: a value neither positive nor negative")
        return pos.astype(np.float32).to_numpy()
    low = text.str.lower()
    pos = low.isin(["1", "true", "yes", "t", "y"])
    neg = low.isin(["0", "false", "no", "f", "n"])
    rest = ~(pos | neg)
    if rest.any():  # numbers that are 0 or 1 ("1.0")
        v = pd.to_numeric(text[rest].str.lstrip("+"), errors="coerce")
        pos[rest], neg[rest] = v == 1, v == 0
    if not (pos | neg).all():
        fail(f"label column {spec.label}: a value that is not a binary label")
    return pos.astype(np.float32).to_numpy()


def numbers(np, pd, column, missing):
    """Floats of a column and its missing mask."""
    miss = column.isin(missing).to_numpy()
    x = np.zeros(len(column), dtype=np.float64)
    x[~miss] = pd.to_numeric(column[~miss].str.strip().str.lstrip("+")).to_numpy(np.float64)
    return x, miss


def quantile_boundaries(np, values, q, given):
    bounds = list(given)
    s = np.sort(values)
    for k in range(1, q):
        if len(s) == 0:
            break
        v = float(s[k * len(s) // q])
        if not bounds or v > bounds[-1]:
            bounds.append(v)
    return bounds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--train", required=True, help="the data file (split as the C++ does)")
    parser.add_argument("--test", default="", help="test file (default: the spec's split)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--validation_fraction", type=float, default=0.1)
    args = parser.parse_args()
    try:
        import numpy as np
        import pandas as pd
        import torch
        from sklearn.metrics import roc_auc_score
    except ImportError as e:
        fail(f"needs python3-torch, python3-pandas, python3-sklearn: {e}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    spec = Spec(args.spec)

    # The splits (data_plan.cc SplitOf): the data file is file 0 of its role; line 1 is the header.
    data = read_csv(pd, args.train, spec)
    lines = np.arange(2, len(data) + 2, dtype=np.uint64)
    test_file = args.test or spec.test_data
    is_test = np.zeros(len(data), dtype=bool)
    if not test_file:
        if spec.test_column:
            is_test = (data[spec.test_column] >= spec.test_at_least).to_numpy()
        else:
            is_test = row_units(np, args.seed, TEST_SALT, 0, lines) < spec.test_fraction
    is_val = ~is_test & (row_units(np, args.seed, VALIDATION_SALT, 0, lines) <
                         args.validation_fraction)
    train = data[~is_test & ~is_val].reset_index(drop=True)
    test = read_csv(pd, test_file, spec) if test_file else data[is_test].reset_index(drop=True)
    n_train, n_val, n_test = len(train), int(is_val.sum()), len(test)
    if n_train == 0 or n_test == 0:
        fail(f"{n_train} training and {n_test} test rows")

    # Transforms and keys: each embedded feature's training values get rows [offset, offset + n);
    # a test value training never had gets -1 (a zero row).
    ids_train, ids_test, dense_train, dense_test = [], [], [], []
    offset = 0
    for f in spec.features:
        col_tr, col_te = train[f["column"]], test[f["column"]]
        if f["type"] == "numeric":
            x_tr, m_tr = numbers(np, pd, col_tr, spec.missing)
            x_te, m_te = numbers(np, pd, col_te, spec.missing)
            if not f["embedded"]:
                if f["transform"] == "standardize":
                    v = x_tr[~m_tr]
                    mean = float(v.mean()) if len(v) else 0.0
                    sd = float(v.std()) if len(v) else 0.0
                    sd = sd if sd > 0 else 1.0
                    x_tr, x_te = (x_tr - mean) / sd, (x_te - mean) / sd
                x_tr[m_tr], x_te[m_te] = 0, 0
                dense_train.append(x_tr.astype(np.float32))
                dense_test.append(x_te.astype(np.float32))
                continue
            q = f["quantiles"]
            bounds = quantile_boundaries(np, x_tr[~m_tr], q, f["boundaries"]) if q > 0 \
                else f["boundaries"]
            bounds = np.array(bounds, dtype=np.float64)
            # The bucket (boundaries <= x), -1 for missing.
            v_tr = np.where(m_tr, -1, np.searchsorted(bounds, x_tr, side="right"))
            v_te = np.where(m_te, -1, np.searchsorted(bounds, x_te, side="right"))
            v_tr, v_te = pd.Series(v_tr), pd.Series(v_te)
        else:
            v_tr = col_tr.where(~col_tr.isin(spec.missing), "\x00missing")
            v_te = col_te.where(~col_te.isin(spec.missing), "\x00missing")
        codes, uniques = pd.factorize(v_tr, sort=False)
        test_codes = pd.Index(uniques).get_indexer(v_te)
        ids_train.append(codes.astype(np.int64) + offset)
        ids_test.append(np.where(test_codes >= 0, test_codes.astype(np.int64) + offset, -1))
        offset += len(uniques)
    num_rows = offset
    F, D = len(ids_train), len(dense_train)
    y_train = labels_of(np, pd, spec, train[spec.label])
    y_test = labels_of(np, pd, spec, test[spec.label])
    prior_p = min(max(float(y_train.astype(np.float64).mean()), 1e-6), 1 - 1e-6)
    prior = math.log(prior_p / (1 - prior_p))

    def tensors(ids, dense, n):
        i = torch.from_numpy(np.stack(ids, axis=1)) if ids else torch.zeros(n, 0, dtype=torch.int64)
        d = torch.from_numpy(np.stack(dense, axis=1)) if dense else torch.zeros(n, 0)
        return i, d
    tr_ids, tr_dense = tensors(ids_train, dense_train, n_train)
    te_ids, te_dense = tensors(ids_test, dense_test, n_test)
    tr_y, te_y = torch.from_numpy(y_train), torch.from_numpy(y_test)

    # Parameters (tabular_model.cc CreateVariables).
    deep = spec.type != "wide"
    wide = spec.type != "deep"
    baseline = spec.type != "wide"
    dim = spec.dim

    def trunc_normal(shape, sd):
        t = torch.empty(*shape)
        if sd > 0:
            torch.nn.init.trunc_normal_(t, 0.0, sd, -2 * sd, 2 * sd)
        else:
            t.zero_()
        return t
    tables = {}  # name -> (rows, accumulator, optimizer part)
    if deep:
        tables["emb"] = trunc_normal((num_rows, dim), spec.init_stddev)
    if wide:
        tables["wide"] = torch.zeros(num_rows, 1)
    if baseline:
        tables["base"] = torch.zeros(num_rows, 1)
    part_of = {"emb": "embeddings", "wide": "wide", "base": "wide"}
    accum = {k: torch.full_like(v, spec.opt[part_of[k]]["accum"]) for k, v in tables.items()}
    dense_params = []
    layers = []
    if deep:
        widths = [F * dim + D] + spec.hidden + [1]
        for l in range(len(widths) - 1):
            fan_in = widths[l]
            sd = math.sqrt(2.0 / fan_in) if l + 2 < len(widths) else 1.0 / math.sqrt(fan_in)
            w = trunc_normal((fan_in, widths[l + 1]), sd).requires_grad_()
            b = torch.zeros(widths[l + 1])
            if l + 2 == len(widths):
                b.fill_(prior)
            b.requires_grad_()
            layers.append((w, b))
            dense_params += [w, b]
    wide_params, base_params = [], []
    if wide:
        wide_bias = torch.full((1,), 0.0 if deep else prior, requires_grad=True)
        wide_dense = torch.zeros(D, 1, requires_grad=True)
        wide_params = [wide_bias] + ([wide_dense] if D else [])
    if baseline:
        base_bias = torch.full((1,), prior, requires_grad=True)
        base_dense = torch.zeros(D, 1, requires_grad=True)
        base_params = [base_bias] + ([base_dense] if D else [])
    optimizers = []
    for params, part in ((dense_params, "dense"), (wide_params + base_params, "wide")):
        if params:
            o = spec.opt[part]
            optimizers.append(torch.optim.Adagrad(params, lr=o["lr"], eps=o["eps"],
                                                  initial_accumulator_value=o["accum"]))

    bce = torch.nn.functional.binary_cross_entropy_with_logits

    def forward(ids, dense, rows):
        """Logits (model, baseline) of a batch; `rows` maps table -> [distinct, width] rows of
        the batch, `ids` [n, F] indexes them (-1: a zero row)."""
        n = ids.shape[0]
        logit = torch.zeros(n)
        base_logit = None
        if deep:
            x = rows["emb"][ids].reshape(n, F * dim)
            if D:
                x = torch.cat([x, dense], dim=1)
            for l, (w, b) in enumerate(layers):
                x = torch.addmm(b, x, w)
                if l + 1 < len(layers):
                    x = torch.relu(x)
            logit = logit + x[:, 0]
        if wide:
            logit = logit + rows["wide"][ids].sum(dim=(1, 2)) + wide_bias
            if D:
                logit = logit + (dense @ wide_dense)[:, 0]
        if baseline:
            base_logit = rows["base"][ids].sum(dim=(1, 2)) + base_bias
            if D:
                base_logit = base_logit + (dense @ base_dense)[:, 0]
        return logit, base_logit

    # The order: one shuffled pass after another, cut every batch_size.
    bs = args.batch_size
    steps = (n_train + bs - 1) // bs * args.epochs
    passes = (steps * bs + n_train - 1) // n_train
    gen = torch.Generator().manual_seed(args.seed)
    order = torch.cat([torch.randperm(n_train, generator=gen) for _ in range(passes)])[:steps * bs]

    start = time.perf_counter()
    for s in range(steps):
        idx = order[s * bs:(s + 1) * bs]
        ids, dense, y = tr_ids[idx], tr_dense[idx], tr_y[idx]
        n = ids.shape[0]
        uniq, inv = torch.unique(ids, return_inverse=True)
        rows = {k: t[uniq].requires_grad_() for k, t in tables.items()}
        logit, base_logit = forward(inv, dense, rows)
        loss = bce(logit, y)
        if baseline:
            loss = loss + bce(base_logit, y)
        for o in optimizers:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in optimizers:
            o.step()
        with torch.no_grad():
            for k, t in tables.items():
                g = rows[k].grad * n  # the summed loss's, per distinct row
                o = spec.opt[part_of[k]]
                a = accum[k][uniq].addcmul_(g, g)
                accum[k][uniq] = a
                t[uniq] = t[uniq] - o["lr"] * g / (a.sqrt() + o["eps"])
    train_seconds = time.perf_counter() - start

    # Scoring: unseen keys read zeros.
    with torch.no_grad():
        logits = []
        for a in range(0, n_test, 8192):
            ids = te_ids[a:a + 8192]
            known = ids >= 0
            uniq, inv = torch.unique(ids.clamp(min=0), return_inverse=True)
            rows = {k: t[uniq] for k, t in tables.items()}
            # A zero row for unknown keys: one past the batch's distinct rows.
            rows = {k: torch.cat([r, torch.zeros(1, r.shape[1])]) for k, r in rows.items()}
            inv = torch.where(known, inv, torch.full_like(inv, len(uniq)))
            logit, _ = forward(inv, te_dense[a:a + 8192], rows)
            logits.append(logit)
        logits = torch.cat(logits).double()
    yt = te_y.double()
    logloss = float((torch.clamp(logits, min=0) - logits * yt +
                     torch.log1p(torch.exp(-logits.abs()))).mean())
    prob = torch.sigmoid(logits).numpy()
    bins = np.minimum(EVAL_BINS - 1, (prob * EVAL_BINS).astype(np.int64))
    pos_hist = np.bincount(bins[y_test > 0.5], minlength=EVAL_BINS).astype(np.float64)
    neg_hist = np.bincount(bins[y_test <= 0.5], minlength=EVAL_BINS).astype(np.float64)
    neg_below = np.concatenate([[0.0], np.cumsum(neg_hist)[:-1]])
    pos_n, neg_n = pos_hist.sum(), neg_hist.sum()
    auc_binned = float((pos_hist * neg_below + 0.5 * pos_hist * neg_hist).sum() /
                       (pos_n * neg_n)) if pos_n > 0 and neg_n > 0 else 0.5
    auc_exact = float(roc_auc_score(y_test, prob)) if pos_n > 0 and neg_n > 0 else 0.5
    print(json.dumps({"name": "torch_peer", "test_auc": auc_binned, "test_auc_exact": auc_exact,
                      "test_logloss": logloss,
                      "examples_per_s": steps * bs / train_seconds if train_seconds > 0 else 0,
                      "train_seconds": train_seconds, "train_rows": n_train,
                      "validation_rows": n_val, "test_rows": n_test, "steps": steps,
                      "seed": args.seed, "threads": args.threads}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
