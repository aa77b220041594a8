"""Build one Interaction Element Graph per site from a run's trajectories.

    python -m graph.build --run RUN [--include-failed] [--workers N]

Reads ``RUN/trajectories.parquet``; writes ``RUN/graphs/<site>/nodes.parquet``,
``RUN/graphs/<site>/edges.parquet``, ``RUN/graphs/<site>/steps.parquet`` (where each demonstrated
step landed: node, op, page), ``RUN/graphs/manifest.json`` (per-site statistics in the
paper's terms) and the ``graph.build`` entry of ``stats.json``. Observations of unsuccessful
trajectories are left out by default (``--include-failed`` keeps them, for analysis); every
observation or step left out is written to ``rejects.jsonl`` with its reason.
"""

from __future__ import annotations

import argparse
import json
import shutil
import os
import sys
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data.actions import ELEMENT_OPS, VALUE_OPS, ActionParseError, parse_action
from data.rundir import Reject, RunDir, StageStats, atomic_write_parquet, atomic_write_text
from data.sites import normalize_url_path
from graph.axtree import AXTreeParseError
from graph.identity import is_interactive, virtual_node
from graph.resolve import resolve_observation
from graph.schema import EDGE_SCHEMA, NODE_SCHEMA, STEP_SCHEMA, table

STAGE = "graph.build"
PLAN_COLUMNS = ["traj_id", "step_idx", "site", "url", "success", "source_path"]
COLUMNS = ["traj_id", "task_id", "step_idx", "site", "url", "observation", "obs_format", "html", "action",
           "action_error", "success"]
MAX_BIDS = 8


@dataclass(slots=True)
class _NodeAcc:
    row: dict
    trajs: set = field(default_factory=set)
    bids: list = field(default_factory=list)
    ops: set = field(default_factory=set)
    values: set = field(default_factory=set)
    n_obs: int = 0
    n_demos: int = 0


@dataclass(slots=True)
class _EdgeAcc:
    depth_gap: int | None
    count: int = 0
    trajs: set = field(default_factory=set)


@dataclass(slots=True)
class SiteGraph:
    """What one site's build produced: tables, counts and rejects."""

    site: str
    nodes: pa.Table
    edges: pa.Table
    steps: pa.Table
    stats: dict
    rejects: list[Reject]


def _value_str(v) -> str:
    return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def build_site(site: str, rows: list[dict], traj_steps: dict[str, list[tuple[int, str]]]) -> SiteGraph:
    """Build the graph of ``site`` from its observations (already filtered by success).

    ``rows`` carry ``next_url`` and ``traj_steps`` lists every trajectory's (step_idx, site):
    see :func:`plan`.
    """
    nodes: dict[str, _NodeAcc] = {}
    contain: dict[tuple[str, str], _EdgeAcc] = {}
    interact: dict[tuple[str, str, str], _EdgeAcc] = {}
    rejects: list[Reject] = []
    obs_rej, step_rej = Counter(), Counter()
    n_obs_out = n_steps_in = n_steps_out = 0
    elements_seen = ambiguous_seen = positional = 0
    collisions = Counter()
    structure = Counter()      # observations by where their structure came from (PageContext.context)
    mapped: dict[tuple[str, int], tuple[str, str]] = {}     # (traj, step) -> (node, op)
    breaks: set[tuple[str, int]] = set()                     # unusable observations: the chain stops
    content_pages: dict[tuple[str, int], str] = {}           # (traj, step) -> page it shows
    pending_virtual: list[tuple[dict, object]] = []
    urls: set[str] = set()

    for row in rows:
        key = {"traj_id": row["traj_id"], "step_idx": row["step_idx"]}
        src = row.get("source_path") or f"{row['traj_id']}#{row['step_idx']}"
        action = None
        if row["action"]:
            try:
                action = parse_action(row["action"])
            except ActionParseError as e:   # canonical data should never get here
                action = e
        extra = (action.bid,) if action is not None and not isinstance(action, Exception) and action.bid else ()
        try:
            res = resolve_observation(row["observation"], row["obs_format"], site, row["url"], row["html"], extra)
        except AXTreeParseError as e:
            breaks.add((row["traj_id"], row["step_idx"]))
            obs_rej["unparseable_observation"] += 1
            rejects.append(Reject(STAGE, "unparseable_observation", src, str(e), key))
            continue
        dups = res.tree.duplicate_bids()
        if dups:
            breaks.add((row["traj_id"], row["step_idx"]))
            obs_rej["duplicate_bids"] += 1
            rejects.append(Reject(STAGE, "duplicate_bids", src, f"bids repeated: {dups[:5]}", key))
            continue
        n_obs_out += 1
        structure[res.page.context] += 1
        content_pages[(row["traj_id"], row["step_idx"])] = res.content_page
        urls.add(res.content_page)
        by_bid = res.tree.by_bid()
        elements_seen += len(res.bid_to_node)
        positional += res.page.collided
        for nid in res.ambiguous:
            ambiguous_seen += len(res.node_to_bids[nid])
            ax = by_bid[res.node_to_bids[nid][0]]
            collisions[(res.url, ax.role, ax.name[:60])] += len(res.node_to_bids[nid])
        for nid, bids in res.node_to_bids.items():
            acc = nodes.get(nid)
            if acc is None:
                ctx = res.contexts[nid]
                ax = by_bid[bids[0]]
                acc = nodes[nid] = _NodeAcc(row={
                    "node_id": nid, "site": site, "url": ctx.page, "kind": "element", "role": ctx.role,
                    "name": ctx.name, "vtype": None, "ancestors": json.dumps(ctx.ancestors, ensure_ascii=False),
                    "ordinal": ctx.ordinal, "signature": json.dumps(ctx.signature, ensure_ascii=False),
                    "positions": json.dumps(ctx.positions) if ctx.positions is not None else None,
                    "context": ctx.context, "interactive": is_interactive(ax)})
            acc.n_obs += 1
            acc.trajs.add(row["traj_id"])
            for b in bids:
                if len(acc.bids) < MAX_BIDS and b not in acc.bids:
                    acc.bids.append(b)
        # Containment: each interactive element to its nearest interactive ancestor.
        for bid, nid in res.bid_to_node.items():
            ax = by_bid[bid]
            anc_bid, gap = _interactive_ancestor(res, ax)
            if anc_bid is None:
                continue
            e = contain.get((nid, res.bid_to_node[anc_bid]))
            if e is None:
                e = contain[(nid, res.bid_to_node[anc_bid])] = _EdgeAcc(gap)
            e.depth_gap = min(e.depth_gap, gap)
            e.count += 1
            e.trajs.add(row["traj_id"])

        if action is None:
            continue
        n_steps_in += 1
        if isinstance(action, Exception):
            step_rej["unparseable_action"] += 1
            rejects.append(Reject(STAGE, "unparseable_action", src, str(action), key))
            continue
        if row["action_error"]:
            step_rej["action_failed"] += 1
            rejects.append(Reject(STAGE, "action_failed", src, row["action_error"][:300], key))
            continue
        if action.op in ELEMENT_OPS:
            nid = res.bid_to_node.get(action.bid)
            if nid is None:
                step_rej["target_not_in_observation"] += 1
                rejects.append(Reject(STAGE, "target_not_in_observation", src,
                                      f"{row['action']}: bid {action.bid!r} is not in the observation", key))
                continue
            acc = nodes[nid]
            if action.op in VALUE_OPS and action.value is not None:
                acc.values.add(f"{action.op}:{_value_str(action.value)}")
        else:
            # Virtual nodes are scoped to the landing page, known once its observation is read.
            pending_virtual.append((row, action))
            continue
        acc.ops.add(action.op)
        acc.n_demos += 1
        n_steps_out += 1
        mapped[(row["traj_id"], row["step_idx"])] = (nid, action.op)

    for row, action in pending_virtual:
        landing = content_pages.get((row["traj_id"], row["step_idx"] + 1))
        if landing is None and row.get("next_url"):   # next observation on another site, or rejected
            landing = normalize_url_path(row["next_url"])
        nid, vtype, page = virtual_node(site, action.op, content_pages[(row["traj_id"], row["step_idx"])], landing)
        acc = nodes.get(nid)
        if acc is None:
            acc = nodes[nid] = _NodeAcc(row={
                "node_id": nid, "site": site, "url": page, "kind": "virtual", "role": vtype,
                "name": action.op, "vtype": vtype, "ancestors": None, "ordinal": None, "signature": None,
                "positions": None, "context": None, "interactive": False})
        acc.trajs.add(row["traj_id"])
        if action.op in ("send_msg_to_user", "report_infeasible", "goto") and action.value is not None:
            acc.values.add(f"{action.op}:{_value_str(action.value)}")
        acc.ops.add(action.op)
        acc.n_demos += 1
        n_steps_out += 1
        mapped[(row["traj_id"], row["step_idx"])] = (nid, action.op)

    # Interaction edges v_t -> v_{t+1}, walking each trajectory in order. A step on another
    # site's page, or an observation we could not read, breaks the chain (what happened there
    # is unknown). A failed action or one whose target is missing changed nothing on the page,
    # so the chain steps over it: the next demonstrated action follows from the same state.
    cross_site = 0
    for traj, steps in traj_steps.items():
        prev = None
        for step_idx, step_site in steps:
            if step_site != site:
                cross_site += prev is not None
                prev = None
                continue
            if (traj, step_idx) in breaks:
                prev = None
                continue
            cur = mapped.get((traj, step_idx))
            if cur is None:
                continue
            if prev is not None:
                e = interact.get((prev[0], cur[0], prev[1]))
                if e is None:
                    e = interact[(prev[0], cur[0], prev[1])] = _EdgeAcc(None)
                e.count += 1
                e.trajs.add(traj)
            prev = cur

    node_rows = []
    for acc in nodes.values():
        node_rows.append({**acc.row, "n_obs": acc.n_obs, "n_traj": len(acc.trajs), "bids": acc.bids,
                          "ops": sorted(acc.ops), "values": sorted(acc.values), "n_demos": acc.n_demos})
    edge_rows = [{"src": s, "dst": d, "type": "containment", "depth_gap": e.depth_gap, "op": None,
                  "count": e.count, "trajectories": sorted(e.trajs)} for (s, d), e in contain.items()]
    edge_rows += [{"src": s, "dst": d, "type": "interaction", "depth_gap": None, "op": op,
                   "count": e.count, "trajectories": sorted(e.trajs)} for (s, d, op), e in interact.items()]
    n_el = sum(1 for r in node_rows if r["kind"] == "element")
    stats = {
        "element_nodes": n_el, "virtual_nodes": len(node_rows) - n_el,
        "containment_edges": len(contain), "interaction_edges": len(interact),
        "trajectories": len({r["traj_id"] for r in rows}), "observations": n_obs_out,
        "url_paths": len(urls), "elements_seen": elements_seen,
        # Observations by structure mode: 'axtree' (indented), 'html' (flat, ancestors from the
        # step's HTML), 'flat' (flat, structure inferred from the text).
        "structure": dict(sorted(structure.items())),
        # Sightings whose context (role, name, chain, ordinal, signature) matched another element
        # of the same page, so that ancestor positions had to tell them apart (repeated widgets).
        "positional_elements": positional,
        "positional_rate": round(positional / elements_seen, 6) if elements_seen else 0.0,
        # Sightings that still share a node with another element of the page: unresolvable.
        "ambiguous_elements": ambiguous_seen,
        "ambiguity_rate": round(ambiguous_seen / elements_seen, 6) if elements_seen else 0.0,
        "collisions": [{"url": u, "role": r, "name": n, "elements": c} for (u, r, n), c in collisions.most_common(10)],
        "cross_site_transitions": cross_site,
        "observations_in": len(rows), "observations_rejected": dict(obs_rej),
        "steps_in": n_steps_in, "steps_out": n_steps_out, "steps_rejected": dict(step_rej),
    }
    node_rows.sort(key=lambda r: r["node_id"])
    edge_rows.sort(key=lambda r: (r["type"], r["src"], r["dst"], r["op"] or ""))
    step_rows = [{"traj_id": t, "step_idx": i, "site": site, "node_id": nid, "kind": nodes[nid].row["kind"],
                  "op": op, "page": content_pages[(t, i)]} for (t, i), (nid, op) in sorted(mapped.items())]
    return SiteGraph(site, table(node_rows, NODE_SCHEMA), table(edge_rows, EDGE_SCHEMA),
                     table(step_rows, STEP_SCHEMA), stats, rejects)


def _interactive_ancestor(res, node) -> tuple[str | None, int]:
    """Nearest interactive ancestor (bid) of an element, and the depth gap to it."""
    tree = res.tree
    if res.page.context in ("axtree", "flat"):
        # Interactive roles are never inert, so the walk can hop from anchor to anchor.
        i = res.page.anchor(node.index)
        while i is not None:
            anc = tree.nodes[i]
            if anc.bid is not None and anc.bid in res.bid_to_node and is_interactive(anc):
                return anc.bid, node.depth - anc.depth
            i = res.page.anchor(i)
        return None, 0
    if res.page.context == "html":
        # flat tree: ancestors from the HTML; depth gap counted in bid-bearing HTML ancestors
        by_bid = tree.by_bid()
        for hops, bid in enumerate(res.page.html_ancestors.get(node.bid, ()), start=1):
            anc = by_bid.get(bid)
            if anc is not None and is_interactive(anc):
                return bid, hops
    return None, 0


def load_plan_rows(run: RunDir) -> list[dict]:
    """The light columns that planning needs (no observation text)."""
    return pq.read_table(run.trajectories, columns=PLAN_COLUMNS).to_pylist()


def plan(rows: list[dict], include_failed: bool) -> tuple[dict[str, dict], list[Reject]]:
    """Decide which observations each site's build reads.

    Returns, per site, ``steps`` ([traj_id, step_idx, next_url] of its observations; next_url
    is the URL of the trajectory's next observation, for virtual nodes scoped to the landing
    page) and ``traj_steps`` (every (step_idx, site) of its trajectories, so that a transition
    through another site's page is not taken for a direct one); and the rejects of planning.
    """
    by_traj: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_traj[r["traj_id"]].append(r)
    per_site: dict[str, dict] = {}
    rejects = []
    for traj, steps in by_traj.items():
        steps.sort(key=lambda r: r["step_idx"])
        if not include_failed and not steps[0]["success"]:
            rejects += [Reject(STAGE, "unsuccessful_trajectory", r["source_path"] or traj,
                               "trajectory did not succeed (use --include-failed to keep it)",
                               {"traj_id": traj, "step_idx": r["step_idx"]}) for r in steps]
            continue
        seq = [(r["step_idx"], r["site"]) for r in steps]
        for r, nxt in zip(steps, steps[1:] + [None]):
            next_url = nxt["url"] if nxt is not None and nxt["step_idx"] == r["step_idx"] + 1 else None
            site_plan = per_site.setdefault(r["site"], {"steps": [], "traj_steps": {}})
            site_plan["steps"].append([traj, r["step_idx"], next_url])
            site_plan["traj_steps"][traj] = seq
    return per_site, rejects


def load_site_rows(run: RunDir, site: str, steps: list[list]) -> list[dict]:
    """The observations of one site that its plan selected, with ``next_url`` attached.

    Each site's build reads its own rows, so observation text never travels between
    processes (or Dask workers); HTML is read only for flat observations, the only ones whose
    ancestors come from it."""
    wanted = {(t, i): nxt for t, i, nxt in steps}
    table_ = pq.read_table(run.trajectories, columns=[c for c in COLUMNS if c != "html"] + ["source_path"],
                           filters=[("site", "==", site)])
    rows = [r for r in table_.to_pylist() if (r["traj_id"], r["step_idx"]) in wanted]
    html = {}
    if any(r["obs_format"] == "flat" for r in rows):
        for r in pq.read_table(run.trajectories, columns=["traj_id", "step_idx", "html"],
                               filters=[("site", "==", site), ("obs_format", "==", "flat")]).to_pylist():
            html[(r["traj_id"], r["step_idx"])] = r["html"]
    for r in rows:
        key = (r["traj_id"], r["step_idx"])
        r["next_url"] = wanted[key]
        r["html"] = html.get(key)
    rows.sort(key=lambda r: (r["traj_id"], r["step_idx"]))
    return rows


def write_site(run: RunDir, graph: SiteGraph) -> Path:
    out = run.graph_dir(graph.site)
    atomic_write_parquet(out / "nodes.parquet", graph.nodes)
    atomic_write_parquet(out / "edges.parquet", graph.edges)
    atomic_write_parquet(out / "steps.parquet", graph.steps)
    return out


def build_and_write_site(run_root: str, site: str, site_plan: dict) -> tuple[str, dict, list[Reject]]:
    """Read, build and write one site's graph; returns (site, stats, rejects)."""
    run = RunDir(run_root)
    graph = build_site(site, load_site_rows(run, site, site_plan["steps"]), site_plan["traj_steps"])
    write_site(run, graph)
    return site, graph.stats, graph.rejects


def _job(args) -> tuple[str, dict, list[Reject]]:
    return build_and_write_site(*args)


def finalize(run: RunDir, results: list[tuple[str, dict, list[Reject]]], plan_rejects: list[Reject],
             n_rows: int, include_failed: bool) -> StageStats:
    """Write the manifest and the stage's stats and rejects from the per-site results."""
    stats = StageStats(STAGE, n_in=n_rows)
    rejects = list(plan_rejects)
    for r in plan_rejects:
        stats.rejected[r.reason] += 1
    step_in = step_out = 0
    step_rej = Counter()
    sites = {}
    for site, s, rej in sorted(results):
        sites[site] = {**s, "dir": str(run.graph_dir(site).relative_to(run.root))}
        stats.n_out += s["observations"]
        stats.rejected.update(s["observations_rejected"])
        step_in += s["steps_in"]
        step_out += s["steps_out"]
        step_rej.update(s["steps_rejected"])
        rejects += rej
    totals = {k: sum(s[k] for s in sites.values()) for k in
              ("element_nodes", "virtual_nodes", "containment_edges", "interaction_edges", "trajectories",
               "observations", "url_paths", "elements_seen", "positional_elements", "ambiguous_elements",
               "cross_site_transitions")}
    structure = Counter()
    for s in sites.values():
        structure.update(s["structure"])
    totals["structure"] = dict(sorted(structure.items()))
    totals["positional_rate"] = round(totals["positional_elements"] / totals["elements_seen"], 6) if totals["elements_seen"] else 0.0
    totals["ambiguity_rate"] = round(totals["ambiguous_elements"] / totals["elements_seen"], 6) if totals["elements_seen"] else 0.0
    # Folders of sites that this build did not produce (an earlier build's) would be loaded as
    # if current: remove them.
    graphs_dir = run.graphs
    keep = {run.graph_dir(s).name for s in sites}
    for d in graphs_dir.iterdir() if graphs_dir.exists() else ():
        if d.is_dir() and d.name not in keep and (d / "nodes.parquet").exists():
            shutil.rmtree(d)
    manifest = {"stage": STAGE, "include_failed": include_failed, "sites": sites, "totals": totals}
    atomic_write_text(run.graph_manifest, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    stats.extra = {"sites": len(sites), **totals,
                   "steps": {"in": step_in, "out": step_out, "rejected": dict(sorted(step_rej.items()))}}
    assert step_in == step_out + sum(step_rej.values())
    run.write_stage(stats, rejects)
    return stats


def build_graphs(run_dir: str | Path, include_failed: bool = False, workers: int | None = None) -> StageStats:
    """Build every site's graph of a run (sites in parallel processes when ``workers`` > 1)."""
    run = RunDir(run_dir)
    if not run.trajectories.exists():
        raise FileNotFoundError(f"{run.trajectories} not found: run `python -m data.ingest` first")
    run.check_inputs(STAGE, run.trajectories)   # writable, this run's trajectories (recorded in stats.json)
    rows = load_plan_rows(run)
    per_site, plan_rejects = plan(rows, include_failed)
    # Largest sites first, so the pool does not end waiting on one big site.
    jobs = [(str(run.root), site, sp) for site, sp in sorted(per_site.items(), key=lambda kv: -len(kv[1]["steps"]))]
    workers = min(workers or os.cpu_count() or 1, len(jobs))
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_job, jobs))
    else:
        results = [_job(j) for j in jobs]
    return finalize(run, results, plan_rejects, len(rows), include_failed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m graph.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="run directory holding trajectories.parquet")
    ap.add_argument("--include-failed", action="store_true", help="also use unsuccessful trajectories")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: one per core)")
    args = ap.parse_args(argv)
    try:
        stats = build_graphs(args.run, args.include_failed, args.workers)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(stats.summary())
    t = stats.extra
    print(f"{t['sites']} site graphs: {t['element_nodes']} element nodes, {t['virtual_nodes']} virtual nodes, "
          f"{t['containment_edges']} containment edges, {t['interaction_edges']} interaction edges; "
          f"ambiguity rate {t['ambiguity_rate']:.4%}")
    print(f"wrote {Path(args.run) / 'graphs' / 'manifest.json'}")
    return 0 if stats.n_out else 1


if __name__ == "__main__":
    sys.exit(main())
