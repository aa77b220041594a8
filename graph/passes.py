"""The passes that build one site's Interaction Element Graph, each a function of its own.

1. :func:`parse_and_resolve`: parse every observation and resolve its elements to their
   persistent identities; an unparseable observation, or one where a bid repeats (no element
   of it could be grounded), is rejected and breaks the interaction chain.
2. :func:`demonstrated_steps`: map each demonstrated step to the node it acted on: the element
   its bid resolves to, or its typed virtual node, scoped to the landing page (the step-to-node
   mapping written to ``graphs/<site>/steps.parquet``, which mining reads).
3. :func:`element_nodes`: one node per persistent identity, with its sightings and the
   demonstrations on it.
4. :func:`virtual_nodes`: one node per virtual node, with the demonstrations it stands for.
5. :func:`containment_edges`: each interactive element to its nearest interactive ancestor.
6. :func:`interaction_edges`: ``v_t -> v_{t+1}`` along each trajectory, labelled with the op of
   ``a_t``.

``graph.build.build_site`` chains them; ``proposals.mine`` uses passes 1 and 2 (the No-Graph
ablation maps steps itself; with graphs it reads the mapping the build wrote).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from data.actions import ELEMENT_OPS, VALUE_OPS, Action, ActionParseError, parse_action
from data.rundir import Reject
from graph.axtree import AXTreeParseError
from graph.identity import (
    DEFAULT_IDENTITY,
    GROUPING_ROLES,
    NodeKind,
    VirtualNode,
    is_interactive,
    page_path,
    virtual_node,
)
from graph.resolve import Resolution, TreeLimitExceeded, resolve_observation

STAGE = "graph.build"
MAX_BIDS = 8             # runtime ids kept per element node (a sample)
# The guards of pass 1 (``graph.build --max-depth/--max-nodes``; 0: no limit). Chromium's HTML
# parser nests at most 512 elements; twice that leaves room for frames. The shared traces reach
# depth 27 and 1,572 nodes.
MAX_DEPTH = 1024
MAX_NODES = 100_000
# Virtual nodes whose action value is recorded (the answer, the reason, the URL).
_VIRTUAL_VALUE_OPS = ("send_msg_to_user", "report_infeasible", "goto")

Key = tuple[str, int]    # (traj_id, step_idx)


def _key(row: dict) -> Key:
    return row["traj_id"], row["step_idx"]


def _source(row: dict) -> str:
    return row.get("source_path") or f"{row['traj_id']}#{row['step_idx']}"


def _reject(reason: str, row: dict, detail: str) -> Reject:
    return Reject(STAGE, reason, _source(row), detail, {"traj_id": row["traj_id"], "step_idx": row["step_idx"]})


def _value_str(v) -> str:
    return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def next_urls(rows: list[dict]) -> list[str | None]:
    """For one trajectory's rows in step order: the URL of each row's next observation (None
    for the last one, or when the next step is missing). Virtual nodes of actions whose landing
    observation is not this site's (or was rejected) are scoped to it."""
    return [nxt["url"] if nxt is not None and nxt["step_idx"] == r["step_idx"] + 1 else None
            for r, nxt in zip(rows, rows[1:] + [None])]


# -- pass 1: parse and resolve ------------------------------------------------------------------
class ObservationRejected(ValueError):
    """An observation the graph build does not use (and mining does not mine)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(slots=True)
class Observation:
    """One observation, parsed and resolved, with the action demonstrated on it."""

    row: dict
    action: Action | ActionParseError | None     # None: no action (the trajectory's last observation)
    res: Resolution
    next_url: str | None = None                  # URL of the trajectory's next observation

    @property
    def key(self) -> Key:
        return _key(self.row)


def observe(row: dict, site: str, next_url: str | None = None, identity: str = DEFAULT_IDENTITY,
            max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES, memo: dict | None = None,
            parsed=None) -> Observation:
    """Parse and resolve one observation row (``traj_id, step_idx, observation, obs_format,
    url, html, action``) under ``identity``; raises :class:`ObservationRejected`
    (``unparseable_observation``, ``too_large``, ``too_deep``, ``duplicate_bids``). ``memo``: a
    dict shared by the observations of one site (see :func:`graph.resolve.resolve_observation`).
    ``parsed`` (a ``graph.parsed.ParsedSite`` of a graph built under ``identity``): the observation
    as the build parsed and resolved it, when it is there (its text is parsed otherwise)."""
    action = None
    if row["action"]:
        try:
            action = parse_action(row["action"])
        except ActionParseError as e:     # canonical data should never get here
            action = e
    extra = (action.bid,) if isinstance(action, Action) and action.bid else ()
    res = None if parsed is None else parsed.resolution(_key(row), row["url"], row.get("html"), identity, memo)
    if res is not None:
        return Observation(row, action, res, next_url)     # the build accepted it
    try:
        res = resolve_observation(row["observation"], row["obs_format"], site, row["url"], row.get("html"), extra,
                                  identity, max_depth, max_nodes, memo)
    except AXTreeParseError as e:
        raise ObservationRejected("unparseable_observation", str(e)) from None
    except TreeLimitExceeded as e:
        raise ObservationRejected(e.reason, e.detail) from None
    dups = res.tree.duplicate_bids()
    if dups:
        raise ObservationRejected("duplicate_bids", f"bids repeated: {dups[:5]}")
    return Observation(row, action, res, next_url)


@dataclass(slots=True)
class Observations:
    """What pass 1 made of one site's rows."""

    site: str
    accepted: list[Observation]
    rejected: dict[Key, str] = field(default_factory=dict)     # key -> reason: the chain breaks there
    rejects: list[Reject] = field(default_factory=list)
    n_in: int = 0
    memo: dict = field(default_factory=dict)     # what the parse and resolution shared (see resolve_observation)


def parse_and_resolve(site: str, rows: list[dict], identity: str = DEFAULT_IDENTITY, max_depth: int = MAX_DEPTH,
                      max_nodes: int = MAX_NODES, memo: dict | None = None) -> Observations:
    """Pass 1: every row (``next_url`` attached, see :func:`next_urls`) parsed and resolved, or
    rejected with its reason. ``memo``: the site's, when its rows come in several calls (the
    build's chunks), so that what one parse learnt serves the next."""
    out = Observations(site, [], n_in=len(rows), memo={} if memo is None else memo)
    for row in rows:
        try:
            out.accepted.append(observe(row, site, row.get("next_url"), identity, max_depth, max_nodes, out.memo))
        except ObservationRejected as e:
            out.rejected[_key(row)] = e.reason
            out.rejects.append(_reject(e.reason, row, e.detail))
    return out


# -- pass 2: the step-to-node mapping -------------------------------------------------------------
@dataclass(slots=True)
class DemoStep:
    """A demonstrated step and the node it acted on."""

    traj_id: str
    step_idx: int
    action: Action
    node_id: str | None          # None: the target bid is not in the observation
    kind: NodeKind | None
    page: str                    # the page the observation shows (``Resolution.content_page``)
    virtual: VirtualNode | None = None

    @property
    def key(self) -> Key:
        return self.traj_id, self.step_idx


@dataclass(slots=True)
class DemonstratedSteps:
    """Pass 2: the demonstrated steps of the accepted observations whose action parsed and did
    not fail, in row order (unresolved targets included, with ``node_id`` None), and the rejects."""

    steps: list[DemoStep]
    n_in: int = 0
    rejected: Counter = field(default_factory=Counter)
    rejects: list[Reject] = field(default_factory=list)

    @property
    def mapped(self) -> dict[Key, DemoStep]:
        return {s.key: s for s in self.steps if s.node_id is not None}

    def extend(self, more: DemonstratedSteps) -> None:
        """Append the steps of the next chunk of observations (whole trajectories, in row order)."""
        self.steps += more.steps
        self.n_in += more.n_in
        self.rejected.update(more.rejected)
        self.rejects += more.rejects


def demonstrated_steps(site: str, obs: Observations) -> DemonstratedSteps:
    """Pass 2: map each demonstrated step to its node. A virtual node is scoped to its landing
    page: the page the next observation shows when it is one of ``obs``, else the normalized
    ``next_url`` (another site's page, or a rejected observation), else the current page."""
    content = {o.key: o.res.content_page for o in obs.accepted}
    out = DemonstratedSteps([])
    for o in obs.accepted:
        row, action = o.row, o.action
        if action is None:
            continue
        out.n_in += 1
        if isinstance(action, Exception):
            out.rejected["unparseable_action"] += 1
            out.rejects.append(_reject("unparseable_action", row, str(action)))
            continue
        if row["action_error"]:
            out.rejected["action_failed"] += 1
            out.rejects.append(_reject("action_failed", row, row["action_error"][:300]))
            continue
        page = content[o.key]
        if action.op in ELEMENT_OPS:
            nid = o.res.bid_to_node.get(action.bid)
            if nid is None:
                out.rejected["target_not_in_observation"] += 1
                out.rejects.append(_reject("target_not_in_observation", row,
                                           f"{row['action']}: bid {action.bid!r} is not in the observation"))
            out.steps.append(DemoStep(row["traj_id"], row["step_idx"], action, nid,
                                      NodeKind.ELEMENT if nid is not None else None, page))
            continue
        landing = content.get((row["traj_id"], row["step_idx"] + 1))
        if landing is None and o.next_url:
            landing = page_path(o.next_url)
        v = virtual_node(site, action.op, page, landing)
        out.steps.append(DemoStep(row["traj_id"], row["step_idx"], action, v.node_id, NodeKind.VIRTUAL, page, v))
    return out


# -- passes 3 and 4: nodes -----------------------------------------------------------------------
@dataclass(slots=True)
class _NodeAcc:
    row: dict
    trajs: set = field(default_factory=set)
    bids: list = field(default_factory=list)
    ops: set = field(default_factory=set)
    values: set = field(default_factory=set)
    n_obs: int = 0
    n_demos: int = 0

    def demonstrated(self, action: Action, value_ops) -> None:
        self.ops.add(action.op)
        self.n_demos += 1
        if action.op in value_ops and action.value is not None:
            self.values.add(f"{action.op}:{_value_str(action.value)}")

    def node_row(self) -> dict:
        return {**self.row, "n_obs": self.n_obs, "n_traj": len(self.trajs), "bids": self.bids,
                "ops": sorted(self.ops), "values": sorted(self.values), "n_demos": self.n_demos}


class ElementNodes:
    """Pass 3, fed chunk by chunk: :meth:`see` takes accepted observations in row order (their
    trees can go once seen), :meth:`rows` (once, at the end) gives the nodes with the
    demonstrations of ``steps``."""

    def __init__(self, site: str):
        self.site = site
        self.nodes: dict[str, _NodeAcc] = {}
        self.elements_seen = self.ambiguous_seen = self.positional = 0
        self.collisions: Counter = Counter()

    def see(self, obs: Observations) -> None:
        nodes, site = self.nodes, self.site
        for o in obs.accepted:
            res = o.res
            by_bid = res.tree.by_bid()
            self.elements_seen += len(res.bid_to_node)
            self.positional += res.page.collided
            for nid in res.ambiguous:
                self.ambiguous_seen += len(res.node_to_bids[nid])
                ax = by_bid[res.node_to_bids[nid][0]]
                self.collisions[(res.url, ax.role, ax.name[:60])] += len(res.node_to_bids[nid])
            for nid, bids in res.node_to_bids.items():
                acc = nodes.get(nid)
                if acc is None:
                    ctx = res.contexts[nid]
                    acc = nodes[nid] = _NodeAcc(row={
                        "node_id": nid, "site": site, "url": ctx.page, "kind": NodeKind.ELEMENT, "role": ctx.role,
                        "name": ctx.name, "vtype": None,
                        "ancestors": json.dumps(ctx.ancestors_json(), ensure_ascii=False),
                        "ordinal": ctx.ordinal, "signature": json.dumps(ctx.signature, ensure_ascii=False),
                        "positions": json.dumps(ctx.positions) if ctx.positions is not None else None,
                        "context": ctx.context, "interactive": is_interactive(by_bid[bids[0]])})
                acc.n_obs += 1
                acc.trajs.add(o.row["traj_id"])
                for b in bids:
                    if len(acc.bids) < MAX_BIDS and b not in acc.bids:
                        acc.bids.append(b)

    def rows(self, steps: DemonstratedSteps) -> tuple[list[dict], dict]:
        for s in steps.steps:
            if s.kind is NodeKind.ELEMENT:
                self.nodes[s.node_id].demonstrated(s.action, VALUE_OPS)
        seen, positional, ambiguous = self.elements_seen, self.positional, self.ambiguous_seen
        sightings = {
            "elements_seen": seen,
            # Sightings whose context (role, name, chain, ordinal, signature) matched another element
            # of the same page, so that ancestor positions had to tell them apart (repeated widgets).
            "positional_elements": positional,
            "positional_rate": round(positional / seen, 6) if seen else 0.0,
            # Sightings that still share a node with another element of the page: unresolvable.
            "ambiguous_elements": ambiguous,
            "ambiguity_rate": round(ambiguous / seen, 6) if seen else 0.0,
            "collisions": [{"url": u, "role": r, "name": n, "elements": c}
                           for (u, r, n), c in self.collisions.most_common(10)],
        }
        return [acc.node_row() for acc in self.nodes.values()], sightings


def element_nodes(site: str, obs: Observations, steps: DemonstratedSteps) -> tuple[list[dict], dict]:
    """Pass 3: one node per persistent identity seen in an accepted observation (its context,
    sightings and a sample of its bids) with the ops and values demonstrated on it; and the
    sighting statistics (elements seen, positional and ambiguous sightings, worst collisions)."""
    acc = ElementNodes(site)
    acc.see(obs)
    return acc.rows(steps)


def virtual_nodes(site: str, steps: DemonstratedSteps) -> list[dict]:
    """Pass 4: one node per virtual node of the demonstrated steps (typed, scoped to its page),
    with the ops, values (answers, reasons, URLs) and trajectories of its demonstrations."""
    nodes: dict[str, _NodeAcc] = {}
    for s in steps.steps:
        if s.kind is not NodeKind.VIRTUAL:
            continue
        v = s.virtual
        acc = nodes.get(v.node_id)
        if acc is None:
            acc = nodes[v.node_id] = _NodeAcc(row={
                "node_id": v.node_id, "site": site, "url": v.page, "kind": NodeKind.VIRTUAL, "role": v.vtype,
                "name": v.op, "vtype": v.vtype, "ancestors": None, "ordinal": None, "signature": None,
                "positions": None, "context": None, "interactive": False})
        acc.trajs.add(s.traj_id)
        acc.demonstrated(s.action, _VIRTUAL_VALUE_OPS)
    return [acc.node_row() for acc in nodes.values()]


# -- passes 5 and 6: edges -----------------------------------------------------------------------
def _interactive_ancestor(res: Resolution, node, containment: str = "ours") -> tuple[str | None, int]:
    """Nearest interactive ancestor (bid) of an element, and the depth gap to it (computed
    once per page for every node: linear in the tree); with ``containment`` 'paper', the nearest
    control, past grouping widgets (``graph.identity.GROUPING_ROLES``)."""
    i, gap = res.page.interactive_ancestor(node.index)
    while containment == "paper" and i is not None and res.tree.nodes[i].role in GROUPING_ROLES:
        i, more = res.page.interactive_ancestor(i)
        gap += more
    if i is None:
        return None, 0
    anc = res.tree.nodes[i]
    return (anc.bid, gap) if anc.bid in res.bid_to_node else (None, 0)


@dataclass(slots=True)
class _EdgeAcc:
    depth_gap: int | None
    count: int = 0
    trajs: set = field(default_factory=set)


class ContainmentEdges:
    """Pass 5, fed chunk by chunk (:meth:`see`, in row order); :meth:`rows` gives the edges."""

    def __init__(self, containment: str = "ours"):
        self.containment = containment
        self.edges: dict[tuple[str, str], _EdgeAcc] = {}

    def see(self, obs: Observations) -> None:
        contain = self.edges
        for o in obs.accepted:
            res = o.res
            by_bid = res.tree.by_bid()
            for bid, nid in res.bid_to_node.items():
                anc_bid, gap = _interactive_ancestor(res, by_bid[bid], self.containment)
                if anc_bid is None:
                    continue
                e = contain.get((nid, res.bid_to_node[anc_bid]))
                if e is None:
                    e = contain[(nid, res.bid_to_node[anc_bid])] = _EdgeAcc(gap)
                e.depth_gap = min(e.depth_gap, gap)
                e.count += 1
                e.trajs.add(o.row["traj_id"])

    def rows(self) -> list[dict]:
        return [{"src": s, "dst": d, "type": "containment", "depth_gap": e.depth_gap, "op": None,
                 "count": e.count, "trajectories": sorted(e.trajs)} for (s, d), e in self.edges.items()]


def containment_edges(obs: Observations, containment: str = "ours") -> list[dict]:
    """Pass 5: each interactive element to its nearest interactive ancestor (child -> ancestor;
    ``containment``: see :func:`_interactive_ancestor`), deduplicated: the smallest depth gap,
    the sightings and their trajectories."""
    acc = ContainmentEdges(containment)
    acc.see(obs)
    return acc.rows()


def interaction_edges(site: str, steps: DemonstratedSteps, breaks: set[Key] | dict[Key, str],
                      traj_steps: dict[str, list[tuple[int, str]]]) -> tuple[list[dict], int]:
    """Pass 6: ``v_t -> v_{t+1}`` labelled with the op of ``a_t``, walking each trajectory
    (``traj_steps``: its (step_idx, site) in order) over the mapped steps; deduplicated with
    counts and trajectories. Returns the edges and the transitions broken by another site.

    A step on another site's page, or an observation that was rejected (``breaks``), breaks the
    chain (what happened there is unknown). A failed action or one whose target is missing
    changed nothing on the page, so the chain steps over it: the next demonstrated action
    follows from the same state."""
    mapped = steps.mapped
    interact: dict[tuple[str, str, str], _EdgeAcc] = {}
    cross_site = 0
    for traj, seq in traj_steps.items():
        prev = None
        for step_idx, step_site in seq:
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
                e = interact.get((prev.node_id, cur.node_id, prev.action.op))
                if e is None:
                    e = interact[(prev.node_id, cur.node_id, prev.action.op)] = _EdgeAcc(None)
                e.count += 1
                e.trajs.add(traj)
            prev = cur
    return [{"src": s, "dst": d, "type": "interaction", "depth_gap": None, "op": op,
             "count": e.count, "trajectories": sorted(e.trajs)} for (s, d, op), e in interact.items()], cross_site
