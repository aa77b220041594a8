"""The replay verdict's tables (issue 38 Build 1, used by ``bench/replay.py``): per candidate set,
and per rule, axis and task, the false negatives (``equivalent``) and the other outcomes' shares,
beside hardness descriptors computed the same way for every set from the recorded observation O_t
(No-Graph and the random floor have no graph of their own):

- ``gmcp``: both targets are elements of O_t (their bids are in its AXTree) and op+ == op-
  (DESIGN's definition, recomputed here rather than read from the miner's ``gmcp`` column);
- ``same_op``: op+ == op- (GMCP without the condition on the targets);
- ``distance``: the containment distance between the two targets, the hops from each up to their
  lowest common ancestor in O_t's AXTree (the indented tree's parent links), summed; ``None`` when
  either target is not an element of O_t;
- ``same_container``: both targets have the same nearest strict ancestor whose role is in
  ``CONTAINER_ROLES`` (the document root when there is none), so two fields of one form, two
  options of one listbox, two cells of one row.

False negatives and shares are counted over the pairs replayed to a verdict (``replay_mismatch``
has none); rates are ``k/n = x% [lo, hi]`` with Wilson 95% intervals (``dataset.stats.wilson``);
differences between two sets carry Newcombe's hybrid score interval built from the two Wilson
intervals.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from dataset.stats import wilson

VERDICTS = ("equivalent", "harmful", "detour", "not_executable")
CONTAINER_ROLES = frozenset({
    "form", "list", "listbox", "group", "radiogroup", "table", "grid", "treegrid", "tree", "row", "rowgroup",
    "menu", "menubar", "tablist", "tabpanel", "toolbar", "dialog", "alertdialog", "navigation", "region",
    "combobox", "article"})
BUCKETS = ("0-2", "3-4", "5-6", "7+", "n/a")


def bucket(distance: int | None) -> str:
    if distance is None:
        return "n/a"
    return "0-2" if distance <= 2 else "3-4" if distance <= 4 else "5-6" if distance <= 6 else "7+"


def describe(tree, action_pos: str, action_neg: str) -> dict:
    """The hardness descriptors (module doc) of one pair on O_t's parsed AXTree ``tree``."""
    from data.actions import ActionParseError, parse_action

    def parsed(text):
        try:
            a = parse_action(text)
        except ActionParseError:
            return None, None
        return a.op, getattr(a, "bid", None)

    (op_pos, bid_pos), (op_neg, bid_neg) = parsed(action_pos), parsed(action_neg)
    by_bid = tree.by_bid()
    a, b = by_bid.get(bid_pos) if bid_pos else None, by_bid.get(bid_neg) if bid_neg else None
    same_op = op_pos is not None and op_pos == op_neg
    out = {"same_op": same_op, "gmcp": same_op and a is not None and b is not None, "distance": None,
           "same_container": None}
    if a is None or b is None:
        return out
    chain_a = [a.index] + [n.index for n in tree.ancestors(a)]
    chain_b = [b.index] + [n.index for n in tree.ancestors(b)]
    common = set(chain_a) & set(chain_b)
    if common:
        out["distance"] = (next(i for i, x in enumerate(chain_a) if x in common)
                           + next(i for i, x in enumerate(chain_b) if x in common))

    def container(node) -> int | None:
        return next((n.index for n in tree.ancestors(node) if n.role in CONTAINER_ROLES), None)

    out["same_container"] = container(a) == container(b)
    return out


def descriptors(run: Path) -> dict[str, dict]:
    """pair_id -> the sampled pair's task, rule, axis and hardness descriptors, from ``run``'s
    candidates and recorded observations."""
    from data.rundir import RunDir
    from graph.axtree import parse_axtree

    cands = [c for c in pq.read_table(run / "candidates.parquet").to_pylist() if c["sampled"]]
    states = RunDir(run).states({(c["traj_id"], c["step_idx"]) for c in cands})
    trees: dict = {}
    out = {}
    for c in cands:
        key = (c["traj_id"], c["step_idx"])
        if key not in trees:
            trees[key] = parse_axtree(states[key].axtree, "indented")
        d = describe(trees[key], c["action_pos"], c["action_neg"])
        out[c["pair_id"]] = {"task": c["task_id"].rsplit(".", 1)[0], "rule": c["rule"], "axis": c["axis"],
                             "stored_gmcp": c["gmcp"], **d}
    return out


def verdict_rows(run: Path) -> list[dict]:
    """Every sampled pair of a replayed ``run``: its outcome joined with its descriptors."""
    desc = descriptors(run)
    rows = []
    for f in ("preferences.parquet", "discarded.parquet"):
        for r in pq.read_table(run / f, columns=["pair_id", "replay_outcome"]).to_pylist():
            rows.append({**desc[r["pair_id"]], "pair_id": r["pair_id"], "outcome": r["replay_outcome"]})
    return rows


def rate(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": k / n if n else None, "lo": lo, "hi": hi}


def cell(r: dict) -> str:
    """``k/n = x% [lo, hi]``."""
    if not r["n"]:
        return "0/0 = n/a"
    return f"{r['k']}/{r['n']} = {r['rate']:.1%} [{r['lo']:.1%}, {r['hi']:.1%}]"


def stats(rows: list[dict]) -> dict:
    """Outcomes, the false-negative rate and shares over the verdicts, and the hardness
    descriptors of ``rows`` (all pairs with a verdict)."""
    outcomes = Counter(r["outcome"] for r in rows)
    judged = [r for r in rows if r["outcome"] in VERDICTS]
    n = len(judged)
    dist = sorted(r["distance"] for r in judged if r["distance"] is not None)
    cont = [r for r in judged if r["same_container"] is not None]
    return {"pairs": len(rows), "outcomes": dict(outcomes), "verdicts": n,
            "false_negatives": rate(outcomes["equivalent"], n),
            "shares": {o: rate(outcomes[o], n) for o in VERDICTS if o != "equivalent"},
            "hardness": {"gmcp": rate(sum(r["gmcp"] for r in judged), n),
                         "same_op": rate(sum(r["same_op"] for r in judged), n),
                         "same_container": rate(sum(r["same_container"] for r in cont), len(cont)),
                         "distance_mean": round(sum(dist) / len(dist), 2) if dist else None,
                         "distance_median": dist[len(dist) // 2] if dist else None,
                         "distance_n": len(dist),
                         "distance_buckets": {b: sum(bucket(r["distance"]) == b for r in judged) for b in BUCKETS}}}


def by(rows: list[dict], key: str) -> dict[str, dict]:
    """:func:`stats` per value of ``key`` (rule, axis, task, or ``bucket``: the distance bucket)."""
    groups: dict[str, list] = {}
    for r in rows:
        g = bucket(r["distance"]) if key == "bucket" else str(r[key])
        groups.setdefault(g, []).append(r)
    order = BUCKETS if key == "bucket" else sorted(groups)
    return {g: stats(groups[g]) for g in order if g in groups}


def difference(a: dict, b: dict) -> dict:
    """a's rate minus b's, with Newcombe's hybrid score interval (from the Wilson intervals)."""
    if not a["n"] or not b["n"]:
        return {"diff": None, "lo": None, "hi": None}
    p1, p2 = a["rate"], b["rate"]
    d = p1 - p2
    return {"diff": d, "lo": d - math.sqrt((p1 - a["lo"]) ** 2 + (b["hi"] - p2) ** 2),
            "hi": d + math.sqrt((a["hi"] - p1) ** 2 + (p2 - b["lo"]) ** 2)}


def standardized(rows: list[dict], reference: list[dict]) -> dict:
    """The false-negative rate of ``rows`` at ``reference``'s hardness: per distance bucket, weighted
    by the reference's share of verdicts in that bucket (buckets ``rows`` lacks are left out and
    their weight reported as ``uncovered``)."""
    mine, ref = by(rows, "bucket"), by(reference, "bucket")
    total = sum(s["verdicts"] for s in ref.values())
    value, covered = 0.0, 0.0
    for b, s in ref.items():
        if b in mine and mine[b]["verdicts"]:
            w = s["verdicts"] / total
            value += w * mine[b]["false_negatives"]["rate"]
            covered += w
    return {"rate": value / covered if covered else None, "uncovered": round(1 - covered, 3)}


def figure(name: str, rows: list[dict], path: Path) -> None:
    """One PNG: the false-negative rate per containment-distance bucket (Wilson intervals), and
    the pairs per bucket."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = by(rows, "bucket")
    labels = [b for b in BUCKETS if b in groups and groups[b]["verdicts"]]
    fns = [groups[b]["false_negatives"] for b in labels]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(6, 5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    x = range(len(labels))
    ax.errorbar(x, [100 * f["rate"] for f in fns], fmt="o", capsize=4,
                yerr=[[100 * (f["rate"] - f["lo"]) for f in fns], [100 * (f["hi"] - f["rate"]) for f in fns]])
    overall = stats(rows)["false_negatives"]
    if overall["n"]:
        ax.axhline(100 * overall["rate"], ls="--", lw=1, color="grey", label=f"all: {cell(overall)}")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_ylabel("false negatives (equivalent), %")
    ax.set_ylim(0, 100)
    ax.set_title(f"{name}: false negatives by containment distance (Wilson 95%)")
    ax2.bar(x, [groups[b]["verdicts"] for b in labels], color="grey")
    ax2.set_ylabel("pairs")
    ax2.set_xticks(list(x), labels)
    ax2.set_xlabel("containment distance: hops via the lowest common ancestor in O_t")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(results: dict[str, dict], names: dict[str, str]) -> list[str]:
    """The verdict table, one row per set (``names``: set key -> its name in the table)."""
    lines = ["| set | pairs (mismatch) | false negatives | harmful | detour | not_executable | GMCP | same op | "
             "same container | distance mean (median) |", "|---" * 10 + "|"]
    for key, s in results.items():
        h = s["hardness"]
        lines.append(f"| {names[key]} | {s['pairs']} ({s['outcomes'].get('replay_mismatch', 0)}) | "
                     f"{cell(s['false_negatives'])} | "
                     + " | ".join(f"{s['shares'][o]['rate']:.0%}" if s['shares'][o]['n'] else "n/a"
                                  for o in ("harmful", "detour", "not_executable"))
                     + f" | {h['gmcp']['rate'] or 0:.0%} | {h['same_op']['rate'] or 0:.0%} | "
                     f"{h['same_container']['rate'] or 0:.0%} | {h['distance_mean']} ({h['distance_median']}) |")
    return lines


def group_table(groups: dict[str, dict], title: str) -> list[str]:
    lines = [f"| {title} | verdicts | false negatives | harmful | detour | GMCP | same container | distance mean |",
             "|---" * 8 + "|"]
    for g, s in groups.items():
        h = s["hardness"]
        lines.append(f"| {g} | {s['verdicts']} | {cell(s['false_negatives'])} | "
                     f"{s['shares']['harmful']['k']} | {s['shares']['detour']['k']} | "
                     f"{h['gmcp']['k']}/{h['gmcp']['n']} | {h['same_container']['k']}/{h['same_container']['n']} | "
                     f"{h['distance_mean']} |")
    return lines
