"""Grounding: the rules run over a trajectory's demonstrated steps, and what they propose becomes
a concrete negative on O_t (one enabled bid, an op, a value) or a drop with its reason.

:class:`Miner` holds the counts and rejects; fill values the LLM must complete are left pending
(``proposals.fill``) and the pool is written by ``proposals.pool``.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, defaultdict

import pyarrow.parquet as pq

from data.actions import VALUE_OPS, Action
from data.rundir import Reject, RunDir
from graph.build import MEMO_ENTRIES, graph_settings, group_rows, memo_entries, site_row_groups
from graph.identity import NodeKind
from graph.parsed import Parsed
from graph.passes import Observation, ObservationRejected, Observations, demonstrated_steps, next_urls, observe
from graph.schema import reading, require_columns
from proposals.affordance import current_values, fill_prompt, is_disabled, page_context, pick_option, pick_value
from proposals.audit import element_targets
from proposals.config import STAGE, MineConfig
from proposals.graphindex import GraphIndex, read_columns
from proposals.pending import Pending, Tally
from proposals.rules import RULE_FUNCS, Proposal, StepContext, TrajStep, draw

INGEST = "python -m data.ingest"
COLUMNS = ["source", "site", "task_id", "traj_id", "step_idx", "intent", "url", "observation", "obs_format",
           "action", "action_error", "success", "source_path", "meta"]


def load_rows(run: RunDir, filters=None) -> list[dict]:
    """The trajectories' rows (``filters``: pyarrow's, e.g. one site's trajectories)."""
    cols = require_columns(run.trajectories, COLUMNS, INGEST)
    with reading(run.trajectories, INGEST):
        def read(columns):
            return (read_columns(run.trajectories, columns) if filters is None
                    else pq.read_table(run.trajectories, columns=columns, filters=filters))

        rows = read(COLUMNS).to_pylist()
        if "html" in cols and any(r["obs_format"] == "flat" for r in rows):
            html = read(["html"]).column("html").to_pylist()
            for r, h in zip(rows, html):
                r["html"] = h if r["obs_format"] == "flat" else None
        else:
            for r in rows:
                r["html"] = None
    return rows


def chunk_rows(run: RunDir, site: str, trajs: dict[str, int]) -> dict[str, list[dict]]:
    """The rows of ``trajs`` (trajectory -> its number of rows) by trajectory, in step order, as
    :func:`load_rows` reads them: from the row groups that may hold ``site`` (``data.ingest``
    clusters rows by site), one at a time, and from the others only for a trajectory with rows
    elsewhere. The pool is never read whole."""
    cols = require_columns(run.trajectories, COLUMNS, INGEST)
    got: dict[str, list[dict]] = {t: [] for t in trajs}
    with reading(run.trajectories, INGEST), pq.ParquetFile(run.trajectories) as f:
        mine = site_row_groups(f, site)
        _read_groups(f, mine, set(trajs), got, "html" in cols)
        missing = {t for t, n in trajs.items() if len(got[t]) < n}
        if missing:
            _read_groups(f, [g for g in range(f.num_row_groups) if g not in set(mine)], missing, got, "html" in cols)
    for rows in got.values():
        rows.sort(key=lambda r: r["step_idx"])
    return got


def _read_groups(f: pq.ParquetFile, groups: list[int], trajs: set[str], got: dict[str, list[dict]],
                 has_html: bool) -> None:
    for g in groups:
        ids = f.read_row_group(g, columns=["traj_id"]).column("traj_id").to_pylist()
        keep = [i for i, t in enumerate(ids) if t in trajs]
        if not keep:
            continue
        for r in group_rows(f, g, COLUMNS, keep, has_html):
            got[r["traj_id"]].append(r)


def webprm_rows(run: RunDir) -> list[dict]:
    """The rows of WebPRM Collection steps (the one audit that reads rows: their rejected actions),
    read only when the run holds some."""
    sources = read_columns(run.trajectories, ["source"]).column("source")
    if "webprm" not in set(sources.unique().to_pylist()):
        return []
    return load_rows(run, filters=[("source", "==", "webprm")])


def _make(op: str, bid: str, value=None) -> Action:
    if op in ("fill", "press"):
        return Action.build(op, bid, str(value))
    if op == "select_option":
        return Action.build(op, bid, value)
    return Action.build(op, bid)


def _pair_id(row: dict, rule: str, action_neg: str) -> str:
    raw = f"{row['traj_id']}\x1f{row['step_idx']}\x1f{rule}\x1f{action_neg}"
    return hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()


class Miner:
    """Runs the rules over a run's successful trajectories and grounds what they propose."""

    def __init__(self, run: RunDir, config: MineConfig):
        self.run, self.config = run, config
        self.tally = Tally()
        self.steps_in = self.steps_mined = 0           # demonstrated steps, and those mined
        self.mined: list[tuple] = []                    # each mined step: (traj, step, pos kind, pos op, looked at)
        self.step_rejected: Counter = Counter()         # steps not mined, by reason
        self.step_rejects: list[Reject] = []
        self._graphs: dict[str, GraphIndex | None] = {}
        # What a site's observations share, parsed and hashed once (graph.resolve's memo, as graph.build uses it).
        self._site_memos: dict[str, dict] = defaultdict(dict)
        # O_t is resolved as the graphs resolved it (their identity, hence their node ids, and
        # their guards); the No-Graph ablation uses graph.build's defaults.
        self.resolve_settings = {} if config.no_graph else graph_settings(run)
        # O_t as graph.build parsed and resolved it (graph.parsed); the No-Graph ablation parses the text.
        # A caller that mines a site in runs sets one per run (``proposals.pool.mine_chunk``).
        self.parsed = None if config.no_graph else Parsed(run.root)

    def trim_memos(self) -> None:
        """Empty a site's memo past ``graph.build.MEMO_ENTRIES`` entries (a cache, as the build's: a
        site's distinct lines grow with its pages)."""
        for memo in self._site_memos.values():
            if memo_entries(memo) > MEMO_ENTRIES:
                memo.clear()

    def graph(self, site: str) -> GraphIndex | None:
        if self.config.no_graph:
            return None
        if site not in self._graphs:
            d = self.run.graph_dir(site)
            self._graphs[site] = GraphIndex(d) if (d / "nodes.parquet").exists() else None
        return self._graphs[site]

    @staticmethod
    def slim(row: dict) -> dict:
        """The fields of a step that travel with its candidates (no observation text)."""
        return {k: row[k] for k in ("site", "task_id", "traj_id", "step_idx", "intent", "source_path")}

    def drop(self, reason: str, row: dict, detail: str, rule: str | None = None) -> None:
        self.tally.drop(reason, row, detail, rule)

    # -- one trajectory -------------------------------------------------------------------
    def step_mapping(self, rows: list[dict], observation) -> dict[int, tuple[str, NodeKind]]:
        """step_idx -> (node, kind) of the trajectory's demonstrated steps: the mapping the graph
        build wrote (``graphs/<site>/steps.parquet``), or, without a graph (the No-Graph
        ablation), the same mapping computed by the build's own pass over the demonstrated
        steps and their landing observations (``observation(step_idx)``, resolved on demand)."""
        out: dict[int, tuple[str, NodeKind]] = {}
        demonstrated = {r["step_idx"] for r in rows if r["action"] and not r["action_error"]}
        wanted = demonstrated | {i + 1 for i in demonstrated}
        for site in dict.fromkeys(r["site"] for r in rows):
            site_rows = [r for r in rows if r["site"] == site]
            graph = self.graph(site)
            if graph is not None:
                for r in site_rows:
                    got = graph.steps.get((r["traj_id"], r["step_idx"]))
                    if got is not None:
                        out[r["step_idx"]] = got
                continue
            seen = [observation(r["step_idx"]) for r in site_rows if r["step_idx"] in wanted]
            obs = Observations(site, [o for o in seen if isinstance(o, Observation)])
            for s in demonstrated_steps(site, obs).steps:
                if s.node_id is not None:
                    out[s.step_idx] = (s.node_id, s.kind)
        return out

    def tallies(self) -> tuple:
        """The counts and rejects of this miner (a worker's, sent back to the parent)."""
        return self.tally, self.steps_in, self.steps_mined, self.step_rejected, self.step_rejects, self.mined

    def absorb(self, tallies: tuple) -> None:
        tally, steps_in, steps_mined, step_rejected, step_rejects, mined = tallies
        self.tally.add(tally)
        self.mined += mined
        self.steps_in += steps_in
        self.steps_mined += steps_mined
        self.step_rejected.update(step_rejected)
        self.step_rejects += step_rejects

    def skip_step(self, reason: str, row: dict, detail: str) -> None:
        """A demonstrated step that is not mined (counted under ``steps.rejected``)."""
        self.step_rejected[reason] += 1
        self.step_rejects.append(Reject(STAGE, reason, row.get("source_path") or row["traj_id"], detail,
                                        {"traj_id": row["traj_id"], "step_idx": row["step_idx"]}))

    def trajectory(self, rows: list[dict]) -> list[Pending]:
        # Pass 1 of the graph build, on demand (failed actions' observations are never read):
        # the observations it rejects (unparseable, a repeated bid) are not mined either.
        by_step = {r["step_idx"]: r for r in rows}
        next_url = dict(zip(by_step, next_urls(rows)))
        memo: dict[int, Observation | ObservationRejected] = {}

        def observation(step_idx: int) -> Observation | ObservationRejected:
            if step_idx not in memo:
                row = by_step[step_idx]
                try:
                    memo[step_idx] = observe(row, row["site"], next_url[step_idx], **self.resolve_settings,
                                             memo=self._site_memos[row["site"]],
                                             parsed=self.parsed and self.parsed.site(row["site"]))
                except ObservationRejected as e:
                    memo[step_idx] = e
            return memo[step_idx]

        mapping = self.step_mapping(rows, observation)

        # The demonstrated steps as TrajSteps (failed actions are no demonstration).
        steps: list[TrajStep] = []
        where: dict[int, int] = {}
        for row in rows:
            if not row["action"] or row["action_error"]:
                continue
            o = observation(row["step_idx"])
            if not isinstance(o, Observation) or not isinstance(o.action, Action):
                continue
            node, kind = mapping.get(row["step_idx"], (None, None))
            where[row["step_idx"]] = len(steps)
            steps.append(TrajStep(row["step_idx"], o.action, node, kind, o.res.content_page))
        element_steps = [s for s in steps if s.kind == NodeKind.ELEMENT]
        goal = element_steps[-1].node if element_steps else None

        out: list[Pending] = []
        for row in rows:
            if not row["action"]:
                continue
            self.steps_in += 1
            if row["action_error"]:
                self.skip_step("action_failed", row, row["action_error"][:300])
                continue
            o = observation(row["step_idx"])
            if isinstance(o, ObservationRejected):
                self.skip_step(o.reason, row, f"observation rejected as by graph.build: {o.detail}")
                continue
            if not isinstance(o.action, Action):
                self.skip_step("unparseable_action", row, str(o.action))
                continue
            ts = steps[where[row["step_idx"]]]
            if ts.kind is None:
                self.skip_step("positive_not_in_observation", row,
                               f"{row['action']}: bid {ts.action.bid!r} is not in the observation")
                continue
            self.steps_mined += 1
            ctx = StepContext(res=o.res, positive=ts.action, pos_node=ts.node, pos_kind=ts.kind,
                              pos_bid=ts.action.bid if ts.kind == NodeKind.ELEMENT else None, steps=steps,
                              position=where[row["step_idx"]], goal=goal, graph=self.graph(row["site"]),
                              prefer_same_op=self.config.params.prefer_same_op)
            looked = self.tally.proposed
            out += self.step(row, ctx)
            looked = self.tally.proposed - looked
            self.mined.append((row["traj_id"], row["step_idx"], str(ts.kind), ts.action.op, looked))
        return out

    # -- one step -------------------------------------------------------------------------
    def step(self, row: dict, ctx: StepContext) -> list[Pending]:
        """Ground first, then cap: each rule's candidates are grounded in the order of a seeded
        draw from the rule's q_G (``--selection sample``) or in the rule's own ranking (``rank``),
        and the first ``max_per_rule`` grounded ones are kept (0: all). Every candidate looked at
        is counted in (``proposed``, per rule), and one grounding removes is dropped with its
        reason; candidates after the cap are never looked at, except the spares drawn to replace
        failed fills (:meth:`spares`), counted only when used. Returns the kept, then the spares."""
        where = f"{self.config.seed}:{row['traj_id']}:{row['step_idx']}"
        rng = random.Random(where)
        kept: dict[str, Pending] = {}
        spares: list[Pending] = []
        cap = self.config.max_per_rule
        slim, pos_str = self.slim(row), ctx.positive.to_string()     # shared by the step's candidates
        for rule in self.config.rules:
            props = RULE_FUNCS[rule](ctx, self.config.params)
            if self.config.selection == "sample":
                props = iter(draw(props, random.Random(f"{where}:{rule}")))
            grounded = 0
            while not cap or grounded < cap:
                prop = next(props, None)
                if prop is None:
                    break
                self.tally.look(rule)
                grounded += self.ground(rule, prop, row, ctx, rng, kept, slim, pos_str)
            if cap and self.config.selection == "sample":
                fills = sum(p.rule == rule and p.value_source == "llm" for p in kept.values())
                spares += self.spares(rule, props, fills, row, ctx, rng, dict(kept), slim, pos_str)
        return list(kept.values()) + spares

    def spares(self, rule: str, props, fills: int, row: dict, ctx: StepContext, rng: random.Random,
               taken: dict[str, Pending], slim: dict, pos_str: str) -> list[Pending]:
        """The next grounded draws of ``rule`` after its cap, one per kept negative that waits for
        an LLM fill (``fills``; a spare that needs one itself counts too), at most ``max_per_rule``:
        each takes the slot of a fill that fails (``proposals.pool``). Each carries the counts of
        drawing it (``Pending.spare``), so a spare never used is never counted; ``taken``: the
        step's kept negatives, which a spare must differ from."""
        out: list[Pending] = []
        while fills > len(out) and len(out) < self.config.max_per_rule:
            mine, self.tally = self.tally, Tally(fired=[])
            try:
                got = None
                for prop in props:
                    self.tally.look(rule)
                    before = len(taken)
                    if self.ground(rule, prop, row, ctx, rng, taken, slim, pos_str):
                        got = list(taken.values())[before]
                        break
            finally:
                mine, self.tally = self.tally, mine
            if got is None:
                break
            got.spare = mine
            fills += got.value_source == "llm"
            out.append(got)
        return out

    def ground(self, rule: str, prop: Proposal, row: dict, ctx: StepContext, rng: random.Random,
               kept: dict[str, Pending], slim: dict, pos_str: str) -> bool:
        """Ground one candidate: a concrete element whose node resolves to exactly one enabled
        bid of O_t, with its op and value, different from the positive (``pos_str``) and from
        what an earlier rule proposed at this step. True when it is kept (in ``kept``, with the
        step's ``slim`` row), else dropped with the reason."""
        if prop.kind == NodeKind.VIRTUAL:
            self.drop("virtual_target", row, f"{rule}: {prop.node} has no DOM anchor", rule)
            return False
        bids = ctx.res.node_to_bids.get(prop.node)
        if not bids:
            self.drop("absent_target", row, f"{rule}: {prop.node} not visible in O_t", rule)
            return False
        if len(bids) > 1:
            self.drop("ambiguous_target", row, f"{rule}: {prop.node} has bids {bids}", rule)
            return False
        bid = bids[0]
        ax = ctx.res.tree.by_bid()[bid]
        if is_disabled(ax):
            self.drop("disabled_target", row, f"{rule}: [{bid}] {ax.role} {ax.name!r} is disabled", rule)
            return False
        p = Pending(slim, pos_str, ctx.positive.op, ctx.pos_kind, ctx.pos_bid, ctx.pos_node, rule,
                     prop, "")
        source = "action"
        if prop.action is not None:            # a demonstrated action, replayed here
            action = prop.action.with_bid(bid)
            if len(element_targets(action)) > 1:
                # drag_and_drop's to_bid is a bid of another observation: it is not re-grounded here.
                self.drop("second_target_ungrounded", row, f"{rule}: {action.to_string()}", rule)
                return False
            p.op, p.value, p.value_source = action.op, action.value, "action"
        else:
            p.op, source = ctx.op_and_source(prop.node, bid)
            if not self._value(p, ctx, ax, rng, row):
                return False
            action = None if p.value_source == "llm" else _make(p.op, bid, p.value)   # LLM values: in a batch later
        if action is not None:
            neg = action.to_string()
            if neg == pos_str:
                self.drop("equals_positive", row, f"{rule}: {neg}", rule)
                return False
            slot = neg
        else:
            # Same element, same op, same prompt: the same negative whichever rule found it.
            slot, neg = f"\x00llm:{prop.node}:{p.op}", f"{p.op} on {prop.node}"
        if slot in kept:
            self.tally.also_fired(kept[slot], rule)
            self.drop("duplicate_negative", row, f"{rule}: {neg} already proposed by {kept[slot].rule}", rule)
            return False
        kept[slot] = p
        self.tally.op_sources[source] += 1
        return True

    def _value(self, p: Pending, ctx: StepContext, ax, rng: random.Random, row: dict) -> bool:
        """Set the value of a fill / select / press negative; False (and a drop) if impossible.
        A fill with no demonstrated value gets an App. D.3 prompt, answered in a batch later."""
        if p.op not in VALUE_OPS:
            return True
        current = current_values(ax, ctx.res.tree)
        taken = {v.lower() for v in current}
        value = ctx.positive.value
        if ctx.positive.op == p.op and value is not None and not isinstance(value, (list, tuple)):
            p.positive_value = str(ctx.positive.value)
            taken = taken | {p.positive_value.strip().lower()}
        if p.op == "select_option":
            p.value, p.value_source = pick_option(ctx.res.tree, ax, taken, rng), "option"
            if p.value is None:
                self.drop("no_option", p.row, f"{p.rule}: no other option on {ax.role} {ax.name!r}", p.rule)
                return False
            return True
        demonstrated = ctx.graph.values(p.proposal.node, p.op) if ctx.graph is not None else \
            [str(s.action.value) for s in ctx.steps if s.node == p.proposal.node and s.action.op == p.op]
        p.value = pick_value(demonstrated, taken, rng)
        if p.value is not None:
            p.value_source = "demonstrated" if ctx.graph is not None else "trajectory"
            return True
        if p.op == "press":
            self.drop("no_value", p.row, f"{p.rule}: no key demonstrated on {ax.name!r}", p.rule)
            return False
        if self.config.no_fill:
            self.drop("no_fill", p.row, f"{p.rule}: {p.op} on {ax.role} {ax.name!r} needs an LLM value (--no-fill)",
                      p.rule)
            return False
        p.value_source, p.current, p.numeric = "llm", current, ax.role == "spinbutton"
        p.prompt = fill_prompt(row["intent"], row["url"], p.proposal.bid, ax, current, p.positive_value,
                               page_context(row["observation"], p.proposal.bid))
        return True
