"""Flat AXTrees against the indented truth: identity partition agreement, structurally_near precision.

    .venv/bin/python bench/flat_axtree.py [--shared ../shared/data] [--near-hops 4] [--no-mine]
                                          [--identity paper|ours]
    .venv/bin/python bench/flat_axtree.py --identities     (issue 22: both identities side by side)

Ingests the shared AgentLab traces (indented AXTrees), flattens their successful trajectories
into WebPRM Collection rows (``graph.flatten``: indentation and HTML dropped), ingests those with
the WebPRM reader, and builds the graphs of both runs. The same observation has the same bids
in both, so an element occurrence is (trajectory, step, bid), and then:

* **partition agreement**: over pairs of occurrences, the share on which flat mode merges the
  two into one node exactly when indented mode does (the Rand index), computed exactly from the
  contingency counts, over all pairs of the site and over pairs within one page (the
  observation's normalized URL). Almost every pair is of two different elements, which both
  modes keep apart, so this share is near 1 for any sane identity; the pairs that either mode
  merges are also reported: ``merge precision`` (pairs flat merges that indented merges too),
  ``merge recall`` (the converse) and their Jaccard.
* **structurally_near precision**: for every demonstrated step on an element, every other element
  that resolves to one bid (the candidates of ``proposals.rules.structurally_near`` before its
  cap): among the pairs that flat mode puts within ``near_hops`` in its page structure, the share
  that are within ``near_hops`` containment hops in the indented page structure; recall the
  converse. Also over the structurally_near candidates that ``proposals.mine`` keeps.

Then mines both runs (fill values from a scripted OpenAI-protocol server: the rules are
measured here, not the model's wording) and prints candidates per rule.

``--identities`` measures both persistent identities (``graph.build --identity paper|ours``) on
the indented traces, their flattened copies and a bid-perturbed copy (every bid renamed, letter
prefix kept): element nodes, ambiguity and positional rates, the element nodes that a build of
the original plus the perturbed copy adds over the original alone (0 for an identity that never
sees bids), the flat/indented partition agreement, the paper's §4.1 per-site ratios, and
(unless ``--no-mine``) the candidates ``proposals.mine`` draws from the indented run's graphs.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from cli.config import make_parser  # noqa: E402
from data.actions import ELEMENT_OPS, parse_action  # noqa: E402
from data.ingest import ingest  # noqa: E402
from data.schema import RULES  # noqa: E402
from graph.build import build_graphs  # noqa: E402
from graph.flatten import flatten_run  # noqa: E402
from graph.identity import DEFAULT_IDENTITY, IDENTITIES  # noqa: E402
from graph.resolve import resolve_observation  # noqa: E402
from proposals.rules import StepContext  # noqa: E402


def _pairs(n: int) -> int:
    return n * (n - 1) // 2


def partition_agreement(occurrences: list[tuple[str, str, str]]) -> dict:
    """(bucket, indented node, flat node) per occurrence -> agreement over pairs within a bucket."""
    by_bucket: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for bucket, a, b in occurrences:
        by_bucket[bucket].append((a, b))
    total = both = ind = flat = 0
    for items in by_bucket.values():
        total += _pairs(len(items))
        both += sum(_pairs(c) for c in Counter(items).values())
        ind += sum(_pairs(c) for c in Counter(a for a, _ in items).values())
        flat += sum(_pairs(c) for c in Counter(b for _, b in items).values())
    agree = total - ind - flat + 2 * both
    return {"occurrences": len(occurrences), "pairs": total, "agreement": agree / total if total else 1.0,
            "merged_indented": ind, "merged_flat": flat, "merged_both": both,
            "merge_precision": both / flat if flat else 1.0, "merge_recall": both / ind if ind else 1.0,
            "merge_jaccard": both / (ind + flat - both) if ind + flat - both else 1.0}


def _context(res, bid: str | None) -> StepContext:
    return StepContext(res, None, "", "element", bid, [], 0, None, None)


def compare(ind_run: Path, flat_run: Path, near_hops: int, identity: str = DEFAULT_IDENTITY) -> dict:
    """Resolve every observation of the flat run and its indented original; occurrences and near pairs."""
    ind_rows = {(r["traj_id"], r["step_idx"]): r for r in pq.read_table(ind_run / "trajectories.parquet").to_pylist()}
    occ_site, occ_page = [], []
    near = Counter()                  # (flat near, indented near) over candidate pairs
    near_of: dict[tuple, bool] = {}   # (traj, step, pos bid, neg bid) -> indented near
    modes = Counter()
    for fr in pq.read_table(flat_run / "trajectories.parquet").to_pylist():
        traj = fr["traj_id"].removeprefix("webprm:")
        ir = ind_rows[(traj, fr["step_idx"])]
        action = parse_action(fr["action"])
        extra = (action.bid,) if action.bid else ()
        ires = resolve_observation(ir["observation"], "indented", ir["site"], ir["url"], None, extra, identity)
        fres = resolve_observation(fr["observation"], "flat", fr["site"], fr["url"], None, extra, identity)
        if ires.tree.duplicate_bids():
            continue
        modes[fres.page.context] += 1
        for bid, fnode in fres.bid_to_node.items():
            inode = ires.bid_to_node[bid]
            occ_site.append((fr["site"], inode, fnode))
            occ_page.append((fr["site"] + " " + ires.url, inode, fnode))
        if action.op not in ELEMENT_OPS or fres.unique_bid(fres.bid_to_node.get(action.bid, "")) is None \
                or ires.unique_bid(ires.bid_to_node[action.bid]) is None:
            continue
        fctx, ictx = _context(fres, action.bid), _context(ires, action.bid)
        src = fres.tree.by_bid()[action.bid].index
        for _, bid, idx in fctx.elements():
            if bid == action.bid or ires.unique_bid(ires.bid_to_node[bid]) is None:
                continue
            f_near = fctx.structural_distance(src, idx) <= near_hops
            i_near = ictx.structural_distance(src, idx) <= near_hops
            near[(f_near, i_near)] += 1
            near_of[(fr["traj_id"], fr["step_idx"], action.bid, bid)] = i_near
    flat_near = near[(True, True)] + near[(True, False)]
    ind_near = near[(True, True)] + near[(False, True)]
    return {"modes": dict(modes), "site": partition_agreement(occ_site), "page": partition_agreement(occ_page),
            "near": {"pairs": sum(near.values()), "flat_near": flat_near, "indented_near": ind_near,
                     "both": near[(True, True)],
                     "precision": near[(True, True)] / flat_near if flat_near else None,
                     "recall": near[(True, True)] / ind_near if ind_near else None},
            "_near_of": near_of}


def mine_run(run: Path, cache: Path) -> tuple[dict, list[dict]]:
    """proposals.mine on a run with scripted fill values; (stats, candidates)."""
    from llm import LLMConfig
    from llm.serve import fixed_answer, serve_in_thread
    from proposals.mine import MineConfig, mine

    server = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "scripted")
    try:
        stats = mine(run, MineConfig(sample_size=10000, seed=42),
                     LLMConfig(base_url=server.base_url, model="scripted", cache_dir=str(cache)), workers=2)
    finally:
        server.shutdown()
    return stats.extra, pq.read_table(run / "candidates.parquet").to_pylist()


def _fmt(p: dict) -> str:
    return (f"agreement {p['agreement']:.4%} over {p['pairs']:,} pairs of {p['occurrences']:,} occurrences; "
            f"merged pairs: indented {p['merged_indented']:,}, flat {p['merged_flat']:,}, both {p['merged_both']:,} "
            f"(merge precision {p['merge_precision']:.2%}, recall {p['merge_recall']:.2%}, "
            f"Jaccard {p['merge_jaccard']:.2%})")

_BID = re.compile(r"^(\t*)\[([A-Za-z]*)(\d+)\]", re.M)
_QUOTED_BID = re.compile(r"'([A-Za-z]*)(\d+)'")


def _perturb(n: str) -> str:
    return str(int(n) * 3 + 7001)


def perturb_bids(row: dict) -> dict:
    """A copy of a trajectory row with every bid renamed (its letter frame prefix kept, its
    number mapped one-to-one), in the observation and in the action."""
    out = dict(row)
    out["observation"] = _BID.sub(lambda m: f"{m.group(1)}[{m.group(2)}{_perturb(m.group(3))}]", row["observation"])
    if row["action"]:
        out["action"] = _QUOTED_BID.sub(lambda m: f"'{m.group(1)}{_perturb(m.group(2))}'", row["action"])
    return out


def _canonical(rows: list[dict], dst: Path) -> None:
    """``rows`` ingested as a run directory (the canonical reader re-validates them)."""
    import pyarrow as pa

    from data.schema import TRAJECTORY_SCHEMA

    src = dst.parent / (dst.name + "-src.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema=TRAJECTORY_SCHEMA), src)
    ingest("canonical", [src], dst, quiet=True)


PAPER_41 = {"nodes_per_observation": 116182 / 9497, "containment_per_node": 1532 / 116182,
            "interaction_per_trajectory": 6739 / 854, "nodes_per_url_path": 116182 / 1409,
            "observations_per_trajectory": 9497 / 854}


def ratios(t: dict) -> dict:
    """The §4.1 ratios of a manifest's totals (per site, summed over sites)."""
    return {"nodes_per_observation": t["element_nodes"] / t["observations"],
            "containment_per_node": t["containment_edges"] / t["element_nodes"],
            "interaction_per_trajectory": t["interaction_edges"] / t["trajectories"],
            "nodes_per_url_path": t["element_nodes"] / t["url_paths"],
            "observations_per_trajectory": t["observations"] / t["trajectories"]}


def identity_table(shared: Path, tmp: Path, near_hops: int, mine: bool = True) -> dict:
    """Both identities on the indented traces, the flat copy and the bid-perturbed copies."""
    from graph.build import BuildConfig

    ingest("agentlab", [shared / "agentlab_workarena"], tmp / "indented", quiet=True)
    flatten_run(tmp / "indented" / "trajectories.parquet", tmp / "rows" / "rows.jsonl")
    ingest("webprm", [tmp / "rows"], tmp / "flat", quiet=True)
    for name in ("indented", "flat"):
        rows = pq.read_table(tmp / name / "trajectories.parquet").to_pylist()
        copy = [{**perturb_bids(r), "traj_id": r["traj_id"] + "~p", "source_path": (r["source_path"] or "") + "~p"}
                for r in rows]
        _canonical(rows + copy, tmp / f"{name}+perturbed")
    out = {}
    for identity in IDENTITIES:
        res: dict = {}
        for name in ("indented", "flat", "indented+perturbed", "flat+perturbed"):
            build_graphs(tmp / name, config=BuildConfig(identity=identity, workers=2))
            res[name] = json.loads((tmp / name / "graphs" / "manifest.json").read_text())["totals"]
            if mine and name == "indented":
                stats, cands = mine_run(tmp / name, tmp / f"llm-{identity}")
                res["mined"] = {"candidates": len(cands), "gmcp_ratio": stats["audit"]["gmcp_ratio"],
                                "by_rule": dict(Counter(c["rule"] for c in cands))}
        cmp = compare(tmp / "indented", tmp / "flat", near_hops, identity)
        cmp.pop("_near_of")
        out[identity] = {"totals": res, "compare": cmp,
                         "added_by_perturbation": {n: res[f"{n}+perturbed"]["element_nodes"] - res[n]["element_nodes"]
                                                   for n in ("indented", "flat")},
                         "ratios": {n: ratios(res[n]) for n in ("indented", "flat")}}
    return out


def print_identity_table(out: dict) -> None:
    print("| | " + " | ".join(f"{i} indented | {i} flat" for i in out) + " |")
    print("| --- |" + " --- |" * (2 * len(out)))
    rows = [("element nodes", lambda o, n: f"{o['totals'][n]['element_nodes']:,}"),
            ("ambiguity rate", lambda o, n: f"{o['totals'][n]['ambiguity_rate']:.3%}"),
            ("positional rate", lambda o, n: f"{o['totals'][n]['positional_rate']:.2%}"),
            ("element nodes added by bid perturbation", lambda o, n: f"{o['added_by_perturbation'][n]:,}"),
            ("containment edges", lambda o, n: f"{o['totals'][n]['containment_edges']:,}"),
            ("interaction edges", lambda o, n: f"{o['totals'][n]['interaction_edges']:,}")]
    rows += [(f"§4.1 {k} (paper {v:.4g})", lambda o, n, k=k: f"{o['ratios'][n][k]:.4g}") for k, v in PAPER_41.items()]
    for label, f in rows:
        print(f"| {label} | " + " | ".join(f"{f(o, 'indented')} | {f(o, 'flat')}" for o in out.values()) + " |")
    for identity, o in out.items():
        if "mined" in o["totals"]:
            m = o["totals"]["mined"]
            print(f"{identity}: proposals.mine on the indented run: {m['candidates']} candidates, GMCP "
                  f"{m['gmcp_ratio']:.2%}; " + ", ".join(f"{k} {m['by_rule'].get(k, 0)}" for k in RULES))
        print(f"{identity}: flat vs indented partition, site pairs: {_fmt(o['compare']['site'])}")
        print(f"{identity}: flat vs indented partition, page pairs: {_fmt(o['compare']['page'])}")


def main(argv: list[str] | None = None) -> int:
    ap = make_parser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--near-hops", type=int, default=4)
    ap.add_argument("--no-mine", action="store_true", help="skip proposals.mine on the flat run")
    ap.add_argument("--identities", action="store_true", help="measure both identities (issue 22) and stop")
    args = ap.parse_args(argv)
    if not (args.shared / "agentlab_workarena").is_dir():
        print(f"skip: shared traces not found at {args.shared}")
        return 0
    if args.identities:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            out = identity_table(args.shared, Path(tmp), args.near_hops, mine=not args.no_mine)
            print(f"measured in {time.perf_counter() - t:.0f} s")
            print_identity_table(out)
            print(json.dumps(out, default=str))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        ingest("agentlab", [args.shared / "agentlab_workarena"], tmp / "indented")
        n_rows = flatten_run(tmp / "indented" / "trajectories.parquet", tmp / "rows" / "rows.jsonl")
        ingest("webprm", [tmp / "rows"], tmp / "flat")
        build_graphs(tmp / "indented", workers=2)
        build_graphs(tmp / "flat", workers=2)
        print(f"{n_rows} WebPRM rows written and ingested, both graphs built in {time.perf_counter() - t:.1f} s")
        for name in ("indented", "flat"):
            m = json.loads((tmp / name / "graphs" / "manifest.json").read_text())
            for site, s in m["sites"].items():
                print(f"{name:8s} {site}: {s['element_nodes']} element nodes, {s['containment_edges']} containment "
                      f"edges, {s['interaction_edges']} interaction edges, ambiguity {s['ambiguity_rate']:.2%}, "
                      f"structure {s.get('structure', {})}")
        t = time.perf_counter()
        r = compare(tmp / "indented", tmp / "flat", args.near_hops)
        print(f"compared in {time.perf_counter() - t:.1f} s; flat observations by structure mode: {r['modes']}")
        print("partition, pairs within the site:", _fmt(r["site"]))
        print("partition, pairs within a page:  ", _fmt(r["page"]))
        n = r["near"]
        print(f"structurally_near (<= {args.near_hops} hops) over {n['pairs']:,} (positive, other element) pairs: "
              f"flat near {n['flat_near']:,}, indented near {n['indented_near']:,}, both {n['both']:,}; "
              f"precision {n['precision'] if n['precision'] is None else format(n['precision'], '.2%')}, "
              f"recall {n['recall'] if n['recall'] is None else format(n['recall'], '.2%')}")
        if args.no_mine:
            return 0
        mined = {}
        for name in ("indented", "flat"):
            t = time.perf_counter()
            _, mined[name] = mine_run(tmp / name, tmp / "llm-cache")
            by_rule = Counter(c["rule"] for c in mined[name])
            print(f"proposals.mine on the {name} run in {time.perf_counter() - t:.1f} s: {len(mined[name])} "
                  "candidates; " + ", ".join(f"{k} {by_rule[k]}" for k in RULES))
        sn = [c for c in mined["flat"] if c["rule"] == "structurally_near"]
        hits = [r["_near_of"].get((c["traj_id"], c["step_idx"], c["pos_bid"], c["neg_bid"])) for c in sn]
        known = [h for h in hits if h is not None]
        if known:
            print(f"mined structurally_near candidates within {args.near_hops} indented hops: "
                  f"{sum(known)}/{len(known)} ({sum(known) / len(known):.2%})")
        paper_format_check(tmp / "flat")
    return 0


def paper_format_check(run: Path) -> None:
    """On the flat run: the audit re-derived from the files, and a TRL export (label-only targets:
    no teacher here) checked to be in the benchmark's format and Action-Only."""
    from dataset.export import export_trl_labels
    from judgment.parse import parse_prompt
    from proposals.audit import write_audit

    audit = write_audit(run, "candidates")
    print(f"proposals.audit on the flat run: {audit['pairs']} pairs, GMCP {audit['gmcp_ratio']:.2%}, "
          f"hallucinated targets {audit['hallucinated_targets']}, sample GMCP {audit['sample']['gmcp_ratio']:.2%}")
    paths = export_trl_labels(run, test_fraction=0.0)
    rows = pq.read_table(paths["train"]).to_pylist()
    cands = {c["pair_id"]: c for c in pq.read_table(run / "candidates.parquet").to_pylist()}
    ok = 0
    for r in rows:
        parts = parse_prompt(r["prompt"])
        c = cands[r["pair_id"]]
        pos, neg = (parts.response_1, parts.response_2) if r["label"] == 1 else (parts.response_2, parts.response_1)
        ok += (pos, neg) == (c["action_pos"], c["action_neg"]) and "THOUGHT" not in r["prompt"][1]["content"]
    print(f"TRL export of the flat run: {len(rows)} rows; {ok} read back with parse_prompt to exactly "
          f"(action_pos, action_neg), Action-Only")


if __name__ == "__main__":
    sys.exit(main())
