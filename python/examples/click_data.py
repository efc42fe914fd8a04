"""A synthetic click log whose true click probabilities are known, so the best possible AUC is
known too (the AUC of the true probabilities): the data of the DLRM example and the tests.

Each row has NUM_SPARSE categorical fields (ids drawn Zipf-like from cardinalities of 10 to
3,000) and NUM_DENSE numeric ones. The click's logit is a bias, plus each id's own effect, plus
the dot products of the fields' latent vectors taken pairwise (the interactions a factorization
machine or DLRM can learn), plus a linear term of the numeric fields; the label is a Bernoulli
draw of sigmoid(logit).
"""

import csv

import numpy as np

NUM_SPARSE = 8
NUM_DENSE = 4
CARDINALITIES = (3000, 1500, 800, 400, 200, 100, 30, 10)
LATENT = 4
BIAS = -1.3  # about 25% clicks


def make_click_log(rows, seed=1, world_seed=7):
    """`rows` examples. `world_seed` fixes the effects (the same world for every call); `seed`
    the draws of rows. Returns {"sparse": (rows, 8) int64 ids, "dense": (rows, 4) float32,
    "label": (rows,) float32, "p": (rows,) the true probabilities}."""
    world = np.random.default_rng(world_seed)
    effects = [world.normal(0, 0.3, c) for c in CARDINALITIES]
    vectors = [world.normal(0, 0.3, (c, LATENT)) for c in CARDINALITIES]
    dense_weights = world.normal(0, 0.3, NUM_DENSE)

    rng = np.random.default_rng(seed)
    sparse = np.empty((rows, NUM_SPARSE), np.int64)
    for f, c in enumerate(CARDINALITIES):
        # Zipf-like: rank r drawn with probability ~ 1 / (r + 1)^1.05 over the field's ids.
        weights = 1.0 / np.arange(1, c + 1) ** 1.05
        sparse[:, f] = rng.choice(c, size=rows, p=weights / weights.sum())
    dense = rng.normal(0, 1, (rows, NUM_DENSE)).astype(np.float32)

    logit = np.full(rows, BIAS) + dense.astype(np.float64) @ dense_weights
    latent = []
    for f in range(NUM_SPARSE):
        logit += effects[f][sparse[:, f]]
        latent.append(vectors[f][sparse[:, f]])
    for a in range(NUM_SPARSE):
        for b in range(a + 1, NUM_SPARSE):
            logit += np.einsum("ij,ij->i", latent[a], latent[b])
    p = 1.0 / (1.0 + np.exp(-logit))
    label = (rng.random(rows) < p).astype(np.float32)
    return {"sparse": sparse, "dense": dense, "label": label, "p": p}


def auc(labels, scores):
    """The exact ROC AUC (ties count half)."""
    labels = np.asarray(labels) > 0.5
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = np.asarray(scores)[order]
    # Average ranks of tied scores.
    i = 0
    while i < len(sorted_scores):
        j = i
        while j + 1 < len(sorted_scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    positives = labels.sum()
    negatives = len(labels) - positives
    return (ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives)


def write_csv(data, path):
    """The log as CSV with a header: f0..f7 (ids as text), d0..d3, click."""
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow([f"f{i}" for i in range(NUM_SPARSE)] +
                        [f"d{i}" for i in range(NUM_DENSE)] + ["click"])
        for s, d, y in zip(data["sparse"], data["dense"], data["label"]):
            writer.writerow([f"v{v}" for v in s] + [f"{x:.6g}" for x in d] + [int(y)])


def feature_spec(test_csv):
    """A tabular feature spec (docs/feature-spec.md) of the CSV: the C++ model's view of it."""
    return {
        "label": {"column": "click", "task": "binary"},
        "features": [{"name": f"f{i}", "type": "categorical", "column": f"f{i}"}
                     for i in range(NUM_SPARSE)] +
                    [{"name": f"d{i}", "type": "numeric", "column": f"d{i}"}
                     for i in range(NUM_DENSE)],
        "split": {"test_data": test_csv},
    }
