"""Controlled-GMCP datasets (surfPRM Table 6): keep a subset of an export's rows whose share of
grounded minimal contrastive pairs is a target ratio, by dropping rows, never by duplicating.

    from dataset.gmcp_ratio import match_gmcp_ratio
    kept, dropped = match_gmcp_ratio(rows, 0.5, seed=42)       # rows carry a bool ``gmcp``

``python -m dataset.export --gmcp-ratio R`` applies it over all of an export's rows together
(train and test of ``trl``/``trl-labels``, the exported pairs of ``webprmbench``), after the task
split is drawn on every row so that the held-out tasks do not move. It keeps as many rows as it
can: the largest subset whose share lies within ``TOLERANCE`` of R, the share as close to R as
that size allows; which rows of a class go is a seeded draw. The dropped rows are rejects with
the reason ``gmcp_ratio`` (``rejects.jsonl``, counted in ``stats.json``: in = out + rejected).
"""

from __future__ import annotations

import math
import random
from collections import Counter

from data.rundir import Reject

TOLERANCE = 0.02


def target_counts(n_gmcp: int, n_other: int, ratio: float, tolerance: float = TOLERANCE) -> tuple[int, int]:
    """(GMCP rows, other rows) to keep: the largest total whose share is within ``tolerance`` of
    ``ratio``, with the share closest to ``ratio`` at that total. ValueError when no non-empty
    subset reaches it (e.g. no GMCP row and a ratio above the tolerance)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"--gmcp-ratio {ratio}: a fraction in [0, 1]")
    for total in range(n_gmcp + n_other, 0, -1):
        low = max(math.ceil((ratio - tolerance) * total - 1e-9), total - n_other, 0)
        high = min(math.floor((ratio + tolerance) * total + 1e-9), n_gmcp, total)
        if low <= high:
            g = min(max(round(ratio * total), low), high)
            return g, total - g
    raise ValueError(f"--gmcp-ratio {ratio}: no subset of {n_gmcp} GMCP and {n_other} other rows has a GMCP share "
                     f"within {tolerance} of it")


def _gmcp(row) -> bool:
    return bool(row["gmcp"])


def match_gmcp_ratio(rows: list, ratio: float, seed: int = 42, is_gmcp=_gmcp) -> tuple[list, list]:
    """(kept rows in their input order, dropped rows) so that the kept rows' share of
    ``is_gmcp(row)`` is ``ratio`` within ``TOLERANCE`` (``target_counts``); the rows dropped
    from each class are a ``random.Random(seed)`` draw."""
    gmcp = [i for i, r in enumerate(rows) if is_gmcp(r)]
    other = [i for i, r in enumerate(rows) if not is_gmcp(r)]
    n_gmcp, n_other = target_counts(len(gmcp), len(other), ratio)
    rng = random.Random(seed)
    keep = set(rng.sample(gmcp, n_gmcp)) | set(rng.sample(other, n_other))
    return [r for i, r in enumerate(rows) if i in keep], [r for i, r in enumerate(rows) if i not in keep]


def share(rows: list, is_gmcp=_gmcp) -> float | None:
    """The rows' GMCP share (None for no rows)."""
    return sum(is_gmcp(r) for r in rows) / len(rows) if rows else None


def drop_to_ratio(stage: str, rows: list, ratio: float | None, seed: int, source: str, is_gmcp=_gmcp,
                  pair_id=lambda r: r["pair_id"]) -> tuple[list, list[Reject], Counter, dict]:
    """An export stage's rows at ``ratio`` (None: all of them): (kept, the rejects with reason
    ``gmcp_ratio``, their count, the ``stats.json`` entry ``gmcp_ratio``: target, tolerance, the
    share before and after, the rows dropped per class)."""
    if ratio is None:
        return rows, [], Counter(), {}
    kept, dropped = match_gmcp_ratio(rows, ratio, seed, is_gmcp)
    rejects = [Reject(stage, "gmcp_ratio", source, f"{'GMCP' if is_gmcp(r) else 'non-GMCP'} row dropped to reach "
                      f"a GMCP share of {ratio}", {"pair_id": pair_id(r)}) for r in dropped]
    entry = {"target": ratio, "tolerance": TOLERANCE, "share_before": share(rows, is_gmcp),
             "share_after": share(kept, is_gmcp), "dropped_gmcp": sum(is_gmcp(r) for r in dropped),
             "dropped_other": sum(not is_gmcp(r) for r in dropped)}
    return kept, rejects, Counter({"gmcp_ratio": len(dropped)} if dropped else {}), {"gmcp_ratio": entry}
