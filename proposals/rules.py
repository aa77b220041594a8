"""The six rules that propose grounded negatives for one demonstrated step.

Each rule is a plain function ``rule(ctx, params) -> Iterator[Proposal]``: which element (node and
bid of the current observation) to act on, optionally the full action (temporal rules replay a
demonstrated action), the evidence that made the rule fire, and its weight under the rule's
proposal distribution q_G (each rule's docstring states it). Each rule yields its candidates ranked
by its own criterion (nearest, most similar, closest in time, least extra distance, tightest loop),
without a cap; ``prefer_same_op`` ranks those taking the positive's op first (an option, off by
default: GMCP is an outcome of the rules, not a target). ``proposals.mine --selection sample`` (the
default, the paper's ``a- ~ q_G``) grounds them in the order of a seeded weighted draw
(:func:`draw`), ``--selection rank`` in rank order. Grounding comes first, then the cap: the miner
keeps the first ``--max-per-rule`` grounded ones, so a rule whose first picks are absent, ambiguous
or already proposed by an earlier rule still fires when it has a grounded candidate further down.

spatial:        structurally_near, textually_near_graph_distant
temporal:       repeat_past, act_too_early
spatiotemporal: away_from_goal, create_a_cycle
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from rapidfuzz import fuzz

from data.actions import Action
from data.sites import normalize_url_path
from graph.identity import NodeKind
from graph.resolve import Resolution
from proposals.affordance import choose_op, select_of
from proposals.graphindex import INF, GraphIndex


@dataclass(slots=True)
class Params:
    """The rules' parameters; each is a flag of ``proposals.mine`` (``--near-hops``, ...)."""

    near_hops: int = field(default=4, metadata={
        "min": 0, "help": "structurally_near: containment hops from the positive on the page"})
    text_ratio: float = field(default=0.75, metadata={
        "min": 0, "max": 1, "help": "textually_near: character-level similarity must exceed this"})
    far_hops: int = field(default=4, metadata={
        "min": 0, "help": "textually_near: graph distance must exceed this (or be unreachable)"})
    window: int = field(default=3, metadata={
        "min": 0, "help": "repeat_past / act_too_early: at most this many steps away"})
    prefer_same_op: bool = field(default=False, metadata={
        "help": "rank candidates taking the positive's op first, and give an element the positive's op "
                "when it was demonstrated on it"})


@dataclass(slots=True)
class TrajStep:
    """One demonstrated step of the trajectory, as mining sees it."""

    step_idx: int
    action: Action
    node: str | None        # element or virtual node id (None when its target was not resolved)
    kind: NodeKind | None   # None when its target was not resolved
    page: str               # content page of its observation


@dataclass(slots=True)
class StepContext:
    res: Resolution                 # the observation O_t, resolved
    positive: Action
    pos_node: str
    pos_kind: NodeKind
    pos_bid: str | None
    steps: list[TrajStep]           # the trajectory's demonstrated steps, in order
    position: int                   # index of this step in ``steps``
    goal: str | None                # the task's final interaction element
    graph: GraphIndex | None        # None in the No-Graph ablation
    prefer_same_op: bool = False
    _chains: dict = field(default_factory=dict)
    _ops: dict = field(default_factory=dict)
    _elements: list | None = None

    # -- the page's structure: interactive elements hang under their non-inert anchors --
    def chain(self, index: int) -> list[int]:
        """[element, anchor, anchor's anchor, ...] in the page's structure tree."""
        got = self._chains.get(index)
        if got is None:
            got, i = [], index
            while i is not None:
                got.append(i)
                i = self.res.page.anchor(i)
            self._chains[index] = got
        return got

    def structural_distance(self, a: int, b: int) -> float:
        return self.meeting({n: k for k, n in enumerate(self.chain(a))}, b)[0]

    def meeting(self, src: dict[int, int], b: int, limit: float = INF) -> tuple[float, int | None]:
        """(structural distance, nearest common anchor) between the element whose chain
        positions are ``src`` (node -> hops up from it) and ``b``; (INF, None) when they share
        no anchor or when the distance exceeds ``limit`` (the walk up from ``b`` stops there)."""
        anchor, k, i = self.res.page.anchor, 0, b
        while i is not None and k <= limit:
            up = src.get(i)
            if up is not None:
                return (k + up, i) if k + up <= limit else (INF, None)
            i, k = anchor(i), k + 1
        return INF, None

    def elements(self) -> list[tuple[str, str, int]]:
        """(node, bid, AX index) of every element that resolves to exactly one bid here and can
        be acted on by itself. The options of a native select (a combobox's option children,
        directly or under its ``MenuListPopup``) are chosen through the select, not clicked:
        they are left out."""
        if self._elements is None:
            by_bid = self.res.tree.by_bid()
            out = []
            for nid, bids in self.res.node_to_bids.items():
                if len(bids) != 1:
                    continue
                ax = by_bid[bids[0]]
                if select_of(self.res.tree, ax) is not None:
                    continue
                out.append((nid, bids[0], ax.index))
            self._elements = sorted(out, key=lambda t: t[2])
        return self._elements

    def ax(self, bid: str):
        return self.res.tree.by_bid()[bid]

    def op_for(self, node: str, bid: str) -> str:
        """The op a negative would take on this element (see ``proposals.affordance``): the op
        demonstrated on it most often, in the graph or (No-Graph) in this trajectory."""
        return self.op_and_source(node, bid)[0]

    def op_and_source(self, node: str, bid: str) -> tuple[str, str]:
        """``op_for`` and where the op came from ('graph', 'role' or 'remapped': App. F)."""
        got = self._ops.get(node)
        if got is None:
            if self.graph is not None:
                demo = self.graph.ops_by_frequency(node)
            else:
                counts = Counter(s.action.op for s in self.steps if s.node == node)
                demo = sorted(counts, key=lambda op: (-counts[op], op))
            got = self._ops[node] = choose_op(self.res.tree, self.ax(bid), demo, self.positive.op,
                                              self.prefer_same_op)
        return got

    def rank_op(self, node: str, bid: str) -> int:
        """The first sort key of every rule: 0 for all candidates by default; with
        ``prefer_same_op``, 0 when acting on the element takes the positive's op, else 1."""
        if not self.prefer_same_op:
            return 0
        return 0 if self.op_for(node, bid) == self.positive.op else 1

    def hop_distance(self, a_node: str, b_node: str, a_bid: str | None, b_bid: str | None) -> float:
        """Graph distance (combined containment + interaction), or the page's structural
        distance in the No-Graph ablation."""
        if self.graph is not None:
            return self.graph.distance(a_node, b_node)
        if a_bid is None or b_bid is None:
            return INF
        return self.structural_distance(self.ax(a_bid).index, self.ax(b_bid).index)


@dataclass(slots=True)
class Proposal:
    node: str
    bid: str
    evidence: dict
    action: Action | None = None    # set when the rule replays a demonstrated action
    kind: NodeKind = NodeKind.ELEMENT   # a replayed action's node may be virtual (never a negative)
    weight: float = 1.0             # q_G: the rule's probability of drawing it, up to a constant (> 0)
    group: int = 0                  # ``prefer_same_op``: group 0 (the positive's op) is drawn first


def draw(proposals: Iterable[Proposal], rng: random.Random) -> list[Proposal]:
    """``a- ~ q_G(a | s_t, a+)`` (§3.3): a rule's candidates in the order of a weighted sample without
    replacement, each next draw taking a remaining candidate with probability proportional to its
    ``weight`` (Efraimidis and Spirakis' keys ``u ** (1 / w)``, largest first); ``prefer_same_op``'s
    group 0 is drawn out before group 1. The miner grounds the draws in this order."""
    keyed = [(p.group, -rng.random() ** (1.0 / p.weight), i, p) for i, p in enumerate(proposals)]
    keyed.sort(key=lambda t: t[:3])
    return [t[3] for t in keyed]


def _others(ctx: StepContext):
    return [(n, b, i) for n, b, i in ctx.elements() if n != ctx.pos_node]


def structurally_near(ctx: StepContext, p: Params) -> Iterator[Proposal]:
    """Elements a few containment hops from the positive target on the current page.
    q_G: p(element) proportional to 1 / hops (nearer is likelier); ranked: nearest first."""
    if ctx.pos_kind != NodeKind.ELEMENT or ctx.pos_bid is None:
        return
    src = {n: k for k, n in enumerate(ctx.chain(ctx.ax(ctx.pos_bid).index))}
    scored = []
    for node, bid, idx in _others(ctx):
        d, common = ctx.meeting(src, idx, p.near_hops)
        if common is not None:
            scored.append((ctx.rank_op(node, bid), d, idx, node, bid, common))
    scored.sort()
    for group, d, _, node, bid, common in scored:
        shared = ctx.res.tree.nodes[common]
        yield Proposal(node, bid, {"hops": d, "near_hops": p.near_hops,
                                   "shared_container": [shared.role, shared.name[:60]]},
                       weight=1.0 / max(d, 1), group=group)


def textually_near_graph_distant(ctx: StepContext, p: Params) -> Iterator[Proposal]:
    """Elements whose text looks like the positive's but that sit far from it in the graph, so
    viable alternative paths (close in the graph) are not penalized. q_G: p(element) proportional to
    the similarity ratio (more alike is likelier); ranked: most similar first."""
    if ctx.pos_kind != NodeKind.ELEMENT or ctx.pos_bid is None:
        return
    name = ctx.ax(ctx.pos_bid).name.strip()
    if not name:
        return
    scored = []
    for node, bid, idx in _others(ctx):
        other = ctx.ax(bid).name.strip()
        if not other:
            continue
        ratio = fuzz.ratio(name, other) / 100.0
        if ratio <= p.text_ratio:
            continue
        hops = ctx.hop_distance(ctx.pos_node, node, ctx.pos_bid, bid)
        if hops > p.far_hops:
            scored.append((ctx.rank_op(node, bid), -ratio, idx, node, bid, ratio, hops))
    scored.sort()
    for group, _, _, node, bid, ratio, hops in scored:
        yield Proposal(node, bid, {"ratio": round(ratio, 4), "text_ratio": p.text_ratio,
                                   "hops": None if hops == INF else hops, "far_hops": p.far_hops,
                                   "distance": "graph" if ctx.graph is not None else "page"},
                       weight=ratio, group=group)


def _replay(ctx: StepContext, p: Params, direction: int, label: str) -> Iterator[Proposal]:
    """Demonstrated actions k = 1..window steps away (replayed actions keep their own op;
    ``prefer_same_op`` moves those with the positive's op ahead). q_G: p(action k steps away)
    proportional to 1 / k (nearer in time is likelier); ranked: nearest first."""
    out = []
    for k in range(1, p.window + 1):
        j = ctx.position + direction * k
        if not 0 <= j < len(ctx.steps):
            break
        other = ctx.steps[j]
        if other.node is None:
            continue
        bids = ctx.res.node_to_bids.get(other.node)
        # Grounding decides about absent, ambiguous and virtual targets (and counts them).
        bid = bids[0] if bids else ""
        group = int(p.prefer_same_op and other.action.op != ctx.positive.op)
        out.append((group, k, Proposal(other.node, bid, {label: k, "from_step": other.step_idx,
                                                         "demonstrated": other.action.to_string(), "window": p.window},
                                       action=other.action, kind=other.kind, weight=1.0 / k, group=group)))
    out.sort(key=lambda t: t[:2])
    for _, _, prop in out:
        yield prop


def repeat_past(ctx: StepContext, p: Params) -> Iterator[Proposal]:
    """The action from k <= N steps back, replayed on its element if it is still visible."""
    return _replay(ctx, p, -1, "k_back")


def act_too_early(ctx: StepContext, p: Params) -> Iterator[Proposal]:
    """The action k <= N steps ahead, taken now because its element is already visible."""
    return _replay(ctx, p, +1, "k_ahead")


def away_from_goal(ctx: StepContext, p: Params) -> Iterator[Proposal]:
    """Elements strictly farther from the task's final interaction element than the positive, at
    a finite distance: an element the goal cannot be reached from is not "farther" (its
    distance is unknown), so it is never proposed. q_G: p(element) proportional to 1 / (its extra
    distance) (a small detour is likelier); ranked: least extra distance first."""
    if ctx.goal is None:
        return
    goal_bid = ctx.res.unique_bid(ctx.goal)
    if ctx.graph is None and goal_bid is None:
        return         # No-Graph: the goal must be on this page to measure anything
    d_pos = ctx.hop_distance(ctx.goal, ctx.pos_node, goal_bid, ctx.pos_bid)
    if d_pos == INF:
        return
    scored = []
    for node, bid, idx in _others(ctx):
        if node == ctx.goal:
            continue
        d = ctx.hop_distance(ctx.goal, node, goal_bid, bid)
        if d_pos < d < INF:
            scored.append((ctx.rank_op(node, bid), d - d_pos, idx, node, bid, d))
    scored.sort()
    for group, extra, _, node, bid, d in scored:
        yield Proposal(node, bid, {"goal": ctx.goal, "pos_hops": d_pos, "neg_hops": d,
                                   "distance": "graph" if ctx.graph is not None else "page"},
                       weight=1.0 / extra, group=group)


def create_a_cycle(ctx: StepContext, p: Params) -> Iterator[Proposal]:
    """Elements that lead back to a page already visited in this trajectory. q_G: p(element)
    proportional to 1 / loop_steps (a tighter loop is likelier); ranked: the tightest loop first
    (the page left most recently, ``loop_steps`` demonstrated steps ago)."""
    here = ctx.res.content_page
    last_seen = {s.page: i for i, s in enumerate(ctx.steps[: ctx.position]) if s.page != here}
    visited = set(last_seen)
    if not visited:
        return
    found = []
    for node, bid, idx in _others(ctx):
        target, via = None, None
        url = ctx.ax(bid).props.get("url") if ctx.ax(bid).role == "link" else None
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            page = normalize_url_path(url)
            if page in visited:
                target, via = page, "link_url"
        if target is None and ctx.graph is not None:
            for nxt in sorted(ctx.graph.successors.get(node, ())):
                page = ctx.graph.page_of(nxt)
                if page in visited:
                    target, via = page, "interaction_edge"
                    break
        if target is not None:
            loop = ctx.position - last_seen[target]
            group = ctx.rank_op(node, bid)
            found.append((group, loop, idx,
                          Proposal(node, bid, {"returns_to": target, "via": via, "current_page": here,
                                               "loop_steps": loop}, weight=1.0 / max(loop, 1), group=group)))
    found.sort(key=lambda t: t[:3])
    for _, _, _, prop in found:
        yield prop


RULE_FUNCS = {
    "structurally_near": structurally_near,
    "textually_near_graph_distant": textually_near_graph_distant,
    "repeat_past": repeat_past,
    "act_too_early": act_too_early,
    "away_from_goal": away_from_goal,
    "create_a_cycle": create_a_cycle,
}
