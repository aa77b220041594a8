"""Controlled-GMCP subsets (surfPRM Table 6): keep rows whose share of grounded minimal contrastive
pairs is a target ratio, by dropping rows, never by duplicating. ``proposals.mine --gmcp-ratio``
applies it to the mined pool (the paper's No-Graph ablation at matched GMCP ratios) and
``dataset.export --gmcp-ratio`` (``dataset.gmcp_ratio``) to an export's rows.

    from proposals.gmcp_ratio import match_gmcp_ratio
    kept, dropped = match_gmcp_ratio(rows, 0.5, seed=42)       # rows carry a bool ``gmcp``

It keeps as many rows as it can: the largest subset whose share lies within ``TOLERANCE`` of R,
the share as close to R as that size allows; which rows of a class go is a seeded draw.
"""

from __future__ import annotations

import math
import random

TOLERANCE = 0.02


class GmcpRatioError(ValueError):
    """No non-empty subset of the rows reaches the target share (a setting the user must change)."""


def target_counts(n_gmcp: int, n_other: int, ratio: float, tolerance: float = TOLERANCE,
                  flag: str = "--gmcp-ratio") -> tuple[int, int]:
    """(GMCP rows, other rows) to keep: the largest total whose share is within ``tolerance`` of
    ``ratio``, with the share closest to ``ratio`` at that total. GmcpRatioError when no non-empty
    subset reaches it (e.g. no GMCP row and a ratio above the tolerance)."""
    if not 0.0 <= ratio <= 1.0:
        raise GmcpRatioError(f"{flag} {ratio}: a fraction in [0, 1]")
    for total in range(n_gmcp + n_other, 0, -1):
        low = max(math.ceil((ratio - tolerance) * total - 1e-9), total - n_other, 0)
        high = min(math.floor((ratio + tolerance) * total + 1e-9), n_gmcp, total)
        if low <= high:
            g = min(max(round(ratio * total), low), high)
            return g, total - g
    raise GmcpRatioError(f"{flag} {ratio}: no subset of {n_gmcp} GMCP and {n_other} other rows has a GMCP share "
                     f"within {tolerance} of it")


def gmcp_of(row) -> bool:
    return bool(row["gmcp"])


def match_gmcp_ratio(rows: list, ratio: float, seed: int = 42, is_gmcp=gmcp_of,
                     flag: str = "--gmcp-ratio") -> tuple[list, list]:
    """(kept rows in their input order, dropped rows) so that the kept rows' share of
    ``is_gmcp(row)`` is ``ratio`` within ``TOLERANCE`` (``target_counts``); the rows dropped
    from each class are a ``random.Random(seed)`` draw."""
    gmcp = [i for i, r in enumerate(rows) if is_gmcp(r)]
    other = [i for i, r in enumerate(rows) if not is_gmcp(r)]
    n_gmcp, n_other = target_counts(len(gmcp), len(other), ratio, flag=flag)
    rng = random.Random(seed)
    keep = set(rng.sample(gmcp, n_gmcp)) | set(rng.sample(other, n_other))
    return [r for i, r in enumerate(rows) if i in keep], [r for i, r in enumerate(rows) if i not in keep]


def share(rows: list, is_gmcp=gmcp_of) -> float | None:
    """The rows' GMCP share (None for no rows)."""
    return sum(is_gmcp(r) for r in rows) / len(rows) if rows else None
