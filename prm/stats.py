"""Accuracy of a PRM's judged pairs with intervals: per-state tables from ``prm.evaluate``'s
``.pairs.jsonl`` records, pairwise and best-of-N accuracy and a bootstrap over states
(``scipy.stats``); a proportion's interval is ``dataset.stats.wilson``.

    tables = [state_table(records_of_seed) for records_of_seed in seeds]
    bootstrap(tables, [state_table(base_records)], n=2000)   # point values, 95% CIs, paired diff
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy import stats

RULES = ("both_orders", "as_given", "debiased")


def is_correct(record: dict, rule: str = "both_orders") -> bool:
    """One judged pair under a rule: ``both_orders`` (the project's: both orders pick the
    demonstrated action), ``as_given`` (the first order only; chance is 50%) or ``debiased``
    (the sign of ``margin(as given) - margin(swapped)``, score-both's verdict: no position bias by
    construction)."""
    if rule == "both_orders":
        return bool(record["correct"])
    if rule == "as_given":
        return record["verdict"] == record["expected"]
    if record.get("margin") is None or record.get("swapped_margin") is None:
        return False
    return (1 if record["margin"] - record["swapped_margin"] >= 0 else 2) == record["expected"]


def state_table(records: list[dict], rule: str = "both_orders") -> dict:
    """Per state ``(source_name, state)``: (pairs right, pairs) from one evaluation's records."""
    out: dict = defaultdict(lambda: [0, 0])
    for r in records:
        key = (r["source_name"], r["state"])
        out[key][0] += is_correct(r, rule)
        out[key][1] += 1
    return {k: tuple(v) for k, v in out.items()}


def _counts(tables: list[dict], keys: list) -> tuple[np.ndarray, np.ndarray]:
    """(pairs right, pairs) as arrays of shape (tables, states)."""
    counts = np.array([[t[k] for k in keys] for t in tables], dtype=float).reshape(len(tables), len(keys), 2)
    return counts[..., 0], counts[..., 1]


def _metrics(right: np.ndarray, pairs: np.ndarray, ix: np.ndarray) -> np.ndarray:
    """[pairwise, best-of-N] over the states ``ix`` (shape (..., states), repeats allowed),
    averaged over the tables (seeds): shape (2, ...)."""
    r, p = right[:, ix], pairs[:, ix]                   # (tables, ..., states)
    return np.stack([(r.sum(-1) / p.sum(-1)).mean(0), (r == p).mean(-1).mean(0)])


def bootstrap(model: list[dict], base: list[dict] | None, n: int = 2000, seed: int = 0) -> dict:
    """Point values and 95% percentile intervals of pairwise and best-of-N accuracy (mean over the
    seeds' tables), resampling held-out states with replacement (``scipy.stats.bootstrap``; the
    pairs of one state move together); with ``base``, also the paired difference model - base on
    the same resampled states."""
    keys = sorted(model[0])
    right, pairs = _counts(model, keys)
    base_counts = _counts(base, keys) if base else None

    def statistic(ix, axis=-1):
        ix = np.asarray(ix, dtype=int)
        m = _metrics(right, pairs, ix)
        return m if base_counts is None else np.concatenate([m, m - _metrics(*base_counts, ix)])

    point = statistic(np.arange(len(keys)))
    if len(keys) > 1:
        res = stats.bootstrap((np.arange(len(keys)),), statistic, n_resamples=n, method="percentile",
                              rng=np.random.default_rng(seed))
        lows, highs = res.confidence_interval
    else:                                  # one state: every resample is the sample itself
        lows = highs = point

    def ci(i: int) -> list[float]:
        return [float(lows[i]), float(highs[i])]

    out = {"pairwise": float(point[0]), "pairwise_ci": ci(0), "bon": float(point[1]), "bon_ci": ci(1),
           "states": len(keys)}
    if base_counts is not None:
        out.update({"pairwise_diff": float(point[2]), "pairwise_diff_ci": ci(2),
                    "bon_diff": float(point[3]), "bon_diff_ci": ci(3)})
        out["beats_base"] = out["pairwise_diff_ci"][0] > 0
    return out
