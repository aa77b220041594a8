"""The GMCP audit: how minimal and how grounded a set of (positive, negative) pairs is.

A pair is a grounded minimal contrastive pair (GMCP) when both targets are real elements of the
observation and both actions use the same op. The non-GMCP residual splits into virtual
positives (the demonstrated action has no element: scroll, go_back, an answer) and affordance
mismatches (both are elements, the ops differ: fill->click, ...). A hallucinated target is a
negative whose bid is not in the observation (must be 0 for mined pairs). The same audit runs on
the rejected actions that come with WebPRM Collection rows (multi-policy negatives), so both
kinds of negatives are compared on the same footing (paper: 24.19% vs 74.60% GMCP).
"""

from __future__ import annotations

import json
from collections import Counter

from data.actions import ELEMENT_OPS, ActionParseError, parse_action
from graph.axtree import AXTreeParseError, parse_axtree
from proposals.schema import AXIS_OF


def _ratio(n: int, d: int) -> float:
    return round(n / d, 6) if d else 0.0


def summarize(pairs: list[dict]) -> dict:
    """Counts and ratios of a list of candidate rows."""
    n = len(pairs)
    gmcp = sum(1 for c in pairs if c["gmcp"])
    virtual = [c for c in pairs if c["pos_kind"] != "element"]
    mismatch = [c for c in pairs if c["pos_kind"] == "element" and c["op_pos"] != c["op_neg"]]
    return {
        "pairs": n,
        "by_rule": dict(sorted(Counter(c["rule"] for c in pairs).items())),
        "by_axis": dict(sorted(Counter(c["axis"] for c in pairs).items())),
        "gmcp": gmcp, "gmcp_ratio": _ratio(gmcp, n),
        "virtual_positive": len(virtual), "virtual_positive_ratio": _ratio(len(virtual), n),
        "affordance_mismatch": len(mismatch), "affordance_mismatch_ratio": _ratio(len(mismatch), n),
        "mismatch_directions": dict(Counter(f"{c['op_pos']}->{c['op_neg']}" for c in mismatch).most_common()),
        "virtual_positive_ops": dict(Counter(c["op_pos"] for c in virtual).most_common()),
        "gmcp_by_rule": {r: _ratio(sum(1 for c in pairs if c["rule"] == r and c["gmcp"]),
                                   sum(1 for c in pairs if c["rule"] == r))
                         for r in sorted({c["rule"] for c in pairs})},
    }


def audit_candidates(cands: list[dict], hallucinated: int) -> dict:
    """Pool and sample summaries; ``hallucinated`` counts written negatives whose target is not
    an element of their observation (checked by the miner against O_t)."""
    return {"pool": summarize(cands), "sample": summarize([c for c in cands if c["sampled"]]),
            "hallucinated_targets": hallucinated,
            "axes_of_rules": AXIS_OF}


def audit_webprm_rejected(rows: list[dict]) -> dict:
    """The audit on WebPRM Collection (chosen, rejected) pairs, where rows carry them."""
    pairs = []
    hallucinated = unparseable = 0
    for r in rows:
        if r["source"] != "webprm" or not r["action"]:
            continue
        rejected = json.loads(r["meta"] or "{}").get("rejected")
        if isinstance(rejected, list):
            rejected = rejected[0] if rejected else None
        if not isinstance(rejected, dict) or not rejected.get("action"):
            continue
        try:
            neg = parse_action(str(rejected["action"]))
            pos = parse_action(r["action"])
        except ActionParseError:
            unparseable += 1
            continue
        try:
            bids = set(parse_axtree(r["observation"], r["obs_format"]).by_bid())
        except AXTreeParseError:
            bids = set()
        pos_el = pos.op in ELEMENT_OPS and pos.bid in bids
        neg_el = neg.op in ELEMENT_OPS and neg.bid in bids
        if neg.op in ELEMENT_OPS and neg.bid not in bids:
            hallucinated += 1
        pairs.append({"rule": "webprm_rejected", "axis": "multi_policy", "pos_kind": "element" if pos_el else "virtual",
                      "op_pos": pos.op, "op_neg": neg.op, "gmcp": pos_el and neg_el and pos.op == neg.op,
                      "neg_element": neg_el})
    out = summarize(pairs)
    out.pop("by_rule"), out.pop("by_axis"), out.pop("gmcp_by_rule")
    out["virtual_negative"] = sum(1 for p in pairs if not p["neg_element"])
    out["hallucinated_targets"] = hallucinated
    out["unparseable"] = unparseable
    return out
