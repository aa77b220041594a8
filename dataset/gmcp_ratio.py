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

from collections import Counter

from data.rundir import Reject
from proposals.gmcp_ratio import TOLERANCE, gmcp_of, match_gmcp_ratio, share, target_counts

# The counting and the draw live in proposals.gmcp_ratio (proposals.mine --pool-gmcp-ratio uses them too).
__all__ = ["TOLERANCE", "drop_to_ratio", "match_gmcp_ratio", "share", "target_counts"]


def drop_to_ratio(stage: str, rows: list, ratio: float | None, seed: int, source: str, is_gmcp=gmcp_of,
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
