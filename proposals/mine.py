"""Propose grounded, minimally contrastive negatives for every demonstrated step.

    python -m proposals.mine --run RUN [--sample-size 10000 --seed 42 --axes spatial,temporal,spatiotemporal --no-graph
                                        --max-per-rule 3 --prefer-same-op]

Reads ``RUN/trajectories.parquet`` and the graphs of ``graph.build`` (with the step-to-node
mapping it wrote; observations it rejected are not mined: ``steps`` in stats.json). Each rule's ranked
candidates are grounded first (the element resolves to exactly one enabled bid of O_t, the negative differs
from the positive and from what an earlier rule proposed at this step, it has a value), and the first
``--max-per-rule`` grounded ones are kept (0: all); what grounding removes is counted per rule and reason
(``rules`` in stats.json). Writes the full pool to
``RUN/candidates.parquet`` with ``sampled`` marking the seeded sample of ``--sample-size`` rows the
teacher will verify, then audits that file with ``proposals.audit`` (re-derived from the files:
``RUN/audit/candidates.json``, copied into the ``proposals.mine`` entry of ``stats.json`` with
the drops by reason) and writes the dropped proposals to ``rejects.jsonl``. ``--no-graph`` mines from the local observation and trajectory
only (the paper's No-Graph ablation); ``--axes`` builds single-axis variants. Same inputs, seed
and LLM cache: byte-identical output.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import multiprocessing
import os
import random
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from data.actions import VALUE_OPS, Action
from data.config import Configurable, check_ranges, make_parser
from data.progress import done_line, progress
from data.rundir import Reject, RunDir, StageStats, atomic_write_parquet
from graph.build import graph_settings
from graph.identity import NodeKind
from graph.passes import Observation, ObservationRejected, Observations, demonstrated_steps, next_urls, observe
from graph.schema import check_outputs, pinned_table, reading, require_columns
from proposals.affordance import (FILL_ATTEMPTS, FILL_TEMPERATURE, current_values, fill_prompt, is_disabled,
                                  page_context, pick_option, pick_value, valid_fill)
from proposals.audit import audit_webprm_rejected, element_targets, write_audit
from proposals.audit import format_audit as format_table_audit
from proposals.graphindex import GraphIndex, check_graphs, read_columns
from proposals.rules import RULE_FUNCS, Params, Proposal, StepContext, TrajStep
from data.schema import AXES, AXIS_OF, CANDIDATE_SCHEMA, RULES

STAGE = "proposals.mine"
INGEST = "python -m data.ingest"
COLUMNS = ["source", "site", "task_id", "traj_id", "step_idx", "intent", "url", "observation", "obs_format",
           "action", "action_error", "success", "source_path", "meta"]


def parse_axes(text: str) -> tuple[str, ...]:
    """``--axes spatial,temporal``: a comma-separated subset of the three axes."""
    axes = tuple(a.strip() for a in text.split(",") if a.strip())
    bad = [a for a in axes if a not in AXES]
    if bad or not axes:
        raise argparse.ArgumentTypeError(f"unknown axes {bad or [text]}; choose from {list(AXES)}")
    return axes


@dataclass
class MineConfig(Configurable):
    """How negatives are mined and sampled; every field is a flag (``data.config``), the rules'
    parameters (``proposals.rules.Params``) too: ``--near-hops``, ``--prefer-same-op``, ..."""

    ARG_GROUP = "mining"

    sample_size: int = field(default=10000, metadata={
        "min": 0, "deprecated": ("budget",), "help": "rows of the seeded sample the teacher verifies"})
    seed: int = field(default=42, metadata={"help": "seeds the sample and the values picked"})
    axes: tuple[str, ...] = field(default=AXES, metadata={
        "help": "comma-separated subset of spatial,temporal,spatiotemporal", "type": parse_axes, "metavar": "AXES"})
    no_graph: bool = field(default=False, metadata={
        "help": "mine from the local observation and trajectory only (the No-Graph ablation)"})
    max_per_rule: int = field(default=3, metadata={
        "min": 0, "metavar": "N", "help": "grounded negatives kept per rule and step, in the rule's own ranking; "
                                          "counted after grounding (our choice: the paper states no cap); 0 = no cap"})
    params: Params = field(default_factory=Params)

    def __post_init__(self):
        check_ranges(self, "MineConfig")      # settings built in Python too (flags and files: when parsed)

    @property
    def rules(self) -> list[str]:
        return [r for r in RULES if AXIS_OF[r] in self.axes]


@dataclass(slots=True)
class _Pending:
    """A grounded negative that still needs its value (fill) or its final checks."""

    row: dict                 # trajectory row of the step
    ctx_pos: str              # canonical positive action
    pos_op: str
    pos_kind: str
    pos_bid: str | None
    pos_node: str
    rule: str
    proposal: Proposal
    op: str
    value: object = None
    value_source: str | None = None
    prompt: list | None = None       # fill prompt when the value comes from the LLM
    numeric: bool = False            # the field takes a number (a spinbutton)
    current: list = field(default_factory=list)    # what the field holds (the value must differ)
    positive_value: str | None = None
    also_fired: list = field(default_factory=list)
    infra: str | None = None         # the LLM layer's infrastructure error, when no answer came
    fill_error: str | None = None    # why the last answer was refused (``valid_fill``)


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

    def __init__(self, run: RunDir, config: MineConfig, graphs: dict[str, GraphIndex | None] | None = None):
        """``graphs``: a site -> graph cache to share (the chunks a worker process mines share one)."""
        self.run, self.config = run, config
        self.drops: Counter = Counter()
        self.rejects: list[Reject] = []
        self.proposed = 0
        self.rule_in: Counter = Counter()               # candidates each rule put forward (grounded or not)
        self.rule_drops: Counter = Counter()            # (rule, reason) -> candidates removed
        self.op_sources: Counter = Counter()            # where grounded negatives' ops came from
        self.steps_in = self.steps_mined = 0           # demonstrated steps, and those mined
        self.step_rejected: Counter = Counter()         # steps not mined, by reason
        self.step_rejects: list[Reject] = []
        self._graphs: dict[str, GraphIndex | None] = {} if graphs is None else graphs
        # What a site's observations share, parsed and hashed once (graph.resolve's memo, as graph.build uses it).
        self._site_memos: dict[str, dict] = defaultdict(dict)
        # O_t is resolved as the graphs resolved it (their identity, hence their node ids, and
        # their guards); the No-Graph ablation uses graph.build's defaults.
        self.resolve_settings = {} if config.no_graph else graph_settings(run)

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
        self.drops[reason] += 1
        key = {"traj_id": row["traj_id"], "step_idx": row["step_idx"]}
        if rule:
            key["rule"] = rule
            self.rule_drops[(rule, reason)] += 1
        self.rejects.append(Reject(STAGE, reason, row.get("source_path") or row["traj_id"], detail, key))

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
        return (self.drops, self.rejects, self.proposed, self.steps_in, self.steps_mined, self.step_rejected,
                self.step_rejects, self.rule_in, self.rule_drops, self.op_sources)

    def absorb(self, tallies: tuple) -> None:
        (drops, rejects, proposed, steps_in, steps_mined, step_rejected, step_rejects, rule_in, rule_drops,
         op_sources) = tallies
        self.rule_in.update(rule_in)
        self.rule_drops.update(rule_drops)
        self.op_sources.update(op_sources)
        self.drops.update(drops)
        self.rejects += rejects
        self.proposed += proposed
        self.steps_in += steps_in
        self.steps_mined += steps_mined
        self.step_rejected.update(step_rejected)
        self.step_rejects += step_rejects

    def skip_step(self, reason: str, row: dict, detail: str) -> None:
        """A demonstrated step that is not mined (counted under ``steps.rejected``)."""
        self.step_rejected[reason] += 1
        self.step_rejects.append(Reject(STAGE, reason, row.get("source_path") or row["traj_id"], detail,
                                        {"traj_id": row["traj_id"], "step_idx": row["step_idx"]}))

    def trajectory(self, rows: list[dict]) -> list[_Pending]:
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
                                             memo=self._site_memos[row["site"]])
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

        out: list[_Pending] = []
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
            out += self.step(row, ctx)
        return out

    # -- one step -------------------------------------------------------------------------
    def step(self, row: dict, ctx: StepContext) -> list[_Pending]:
        """Ground first, then cap: each rule's candidates are grounded in the rule's own order
        and the first ``max_per_rule`` grounded ones are kept (0: all). Every candidate looked
        at is counted in (``proposed``, per rule), and one grounding removes is dropped with its
        reason; candidates ranked below the cap are never looked at."""
        rng = random.Random(f"{self.config.seed}:{row['traj_id']}:{row['step_idx']}")
        kept: dict[str, _Pending] = {}
        cap = self.config.max_per_rule
        slim, pos_str = self.slim(row), ctx.positive.to_string()     # shared by the step's candidates
        for rule in self.config.rules:
            grounded = 0
            for prop in RULE_FUNCS[rule](ctx, self.config.params):
                if cap and grounded >= cap:
                    break
                self.proposed += 1
                self.rule_in[rule] += 1
                grounded += self.ground(rule, prop, row, ctx, rng, kept, slim, pos_str)
        return list(kept.values())

    def ground(self, rule: str, prop: Proposal, row: dict, ctx: StepContext, rng: random.Random,
               kept: dict[str, _Pending], slim: dict, pos_str: str) -> bool:
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
        p = _Pending(slim, pos_str, ctx.positive.op, ctx.pos_kind, ctx.pos_bid, ctx.pos_node, rule,
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
            kept[slot].also_fired.append(rule)
            self.drop("duplicate_negative", row, f"{rule}: {neg} already proposed by {kept[slot].rule}", rule)
            return False
        kept[slot] = p
        self.op_sources[source] += 1
        return True

    def _value(self, p: _Pending, ctx: StepContext, ax, rng: random.Random, row: dict) -> bool:
        """Set the value of a fill / select / press negative; False (and a drop) if impossible.
        A fill with no demonstrated value gets an App. D.3 prompt, answered in a batch later."""
        if p.op not in VALUE_OPS:
            return True
        current = current_values(ax, ctx.res.tree)
        taken = {v.lower() for v in current}
        if ctx.positive.op == p.op and ctx.positive.value is not None and not isinstance(ctx.positive.value, (list, tuple)):
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
        p.value_source, p.current, p.numeric = "llm", current, ax.role == "spinbutton"
        p.prompt = fill_prompt(row["intent"], row["url"], p.proposal.bid, ax, current, p.positive_value,
                               page_context(row["observation"], p.proposal.bid))
        return True

    # -- fill values through the LLM layer (App. D.3) -----------------------------------------
    def complete_fills(self, pending: list[_Pending], llm_config, show_progress: bool = False) -> tuple[dict, dict]:
        """Ask for the missing fill values at temperature 0.2; an answer that fails
        ``valid_fill`` is asked again with the next seed, up to ``FILL_ATTEMPTS`` requests, and
        its field is then rejected with the last reason. Returns (LLM usage, fill counts)."""
        need = [p for p in pending if p.value_source == "llm"]
        counts = {"fields": len(need), "valid_at_attempt": Counter(), "invalid_answers": Counter()}
        if not need:
            return {}, counts
        from llm import LLMClient

        client = LLMClient(llm_config)
        todo = need
        for attempt in range(FILL_ATTEMPTS):
            # Identical prompts (the same field on replicated or repeated pages) are asked once.
            prompts: dict[str, list] = {}
            for p in todo:
                prompts.setdefault(json.dumps(p.prompt, sort_keys=True), p.prompt)
            keys = list(prompts)
            with progress(len(keys), f"{STAGE} fill values (answer {attempt + 1}/{FILL_ATTEMPTS})", unit="prompt",
                          enabled=show_progress) as bar:
                answers = dict(zip(keys, client.chat_many([prompts[k] for k in keys], stage=STAGE,
                                                          on_result=lambda _: bar.update(1),
                                                          temperature=FILL_TEMPERATURE,
                                                          seed=self.config.seed + attempt, max_tokens=48)))
            retry = []
            for p in todo:
                r = answers[json.dumps(p.prompt, sort_keys=True)]
                if not r.ok:
                    p.value, p.infra = None, r.infra_error
                    continue
                p.value, p.fill_error = valid_fill(r.text, p.current, p.positive_value, p.numeric)
                if p.value is None:
                    counts["invalid_answers"][p.fill_error] += 1
                    retry.append(p)
                else:
                    counts["valid_at_attempt"][attempt + 1] += 1
            todo = retry
            if not todo:
                break
        usage = client.usage[STAGE].as_dict() if STAGE in client.usage else {}
        return usage, {k: dict(sorted(v.items())) if isinstance(v, Counter) else v for k, v in counts.items()}


_ROWS_BY_TRAJ: dict[str, list[dict]] | None = None   # set in the parent, inherited by forked workers
_WORKER_GRAPHS: dict[str, dict] = {}     # in a worker: run directory -> the site graphs its chunks loaded


def _mine_chunk(args):
    run_root, config, trajs = args
    miner = Miner(RunDir(run_root), config, graphs=_WORKER_GRAPHS.setdefault(run_root, {}))
    pending = []
    # The cycle collector paused for the chunk: parsing allocates millions of short-lived objects
    # (freed by reference counting) and each collection walked the inherited rows too (~14% of
    # the mining's CPU time on the paper-scale pool).
    gc.disable()
    try:
        for traj in trajs:
            pending += miner.trajectory(_ROWS_BY_TRAJ[traj])
    finally:
        gc.enable()
    return pending, miner.tallies()


def open_run(run_dir: str | Path, config: MineConfig) -> RunDir:
    """The run directory to mine, checked (inputs, graphs, writable outputs) and locked for this stage."""
    run = RunDir(run_dir)
    if not run.trajectories.exists():
        raise FileNotFoundError(f"{run.trajectories} not found: run `python -m data.ingest` first")
    if not config.no_graph and not run.graph_manifest.exists():
        raise FileNotFoundError(f"{run.root / 'graphs'} not found: run `python -m graph.build` first "
                                f"(or mine with --no-graph)")
    run.check_inputs(STAGE, run.trajectories, *(() if config.no_graph else (run.graphs,)))   # same upstream run
    check_outputs(run, files=("candidates.parquet", "audit/candidates.json"), dirs=("audit",))
    if not config.no_graph:
        check_graphs(run)      # the graph tables open (the trajectories: in load_rows)
    return run


def successful_trajectories(rows: list[dict]) -> tuple[dict[str, list[dict]], list[str]]:
    """The rows by trajectory (in step order) and the ids of the successful trajectories, sorted."""
    by_traj: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_traj[r["traj_id"]].append(r)
    trajs = []
    for traj in sorted(by_traj):
        by_traj[traj].sort(key=lambda r: r["step_idx"])
        if by_traj[traj][0]["success"]:
            trajs.append(traj)
    return by_traj, trajs


def site_chunks(by_traj: dict[str, list[dict]], trajs: list[str], size: int) -> list[list[str]]:
    """The trajectories in chunks of at most ``size``, each of one site (a trajectory's site: its
    first step's), the chunks with the most observations first (they are handed out in order)."""
    sites: dict[str, list[str]] = defaultdict(list)
    for traj in trajs:
        sites[by_traj[traj][0]["site"]].append(traj)
    chunks = [ts[i:i + size] for ts in sites.values() for i in range(0, len(ts), size)]
    return sorted(chunks, key=lambda c: -sum(len(by_traj[t]) for t in c))


def in_trajectory_order(miner: Miner, pending: list[_Pending]) -> None:
    """Results of trajectories mined in any order put back in the order of a one-process run (a
    stable sort by trajectory id: each trajectory is mined whole, in step order, by one miner)."""
    pending.sort(key=lambda p: p.row["traj_id"])
    for rejects in (miner.rejects, miner.step_rejects):
        rejects.sort(key=lambda r: r.key["traj_id"])


def mine(run_dir: str | Path, config: MineConfig | None = None, llm_config=None,
         workers: int | None = None, show_progress: bool = True) -> StageStats:
    """Mine the full candidate pool of a run; write ``candidates.parquet`` and the audit
    (``show_progress``: bars of the trajectories mined and the fill values asked, on stderr)."""
    config = config or MineConfig()
    run = open_run(run_dir, config)
    t0 = time.perf_counter()
    rows = load_rows(run)
    by_traj, trajs = successful_trajectories(rows)
    miner = Miner(run, config)
    pending: list[_Pending] = []
    workers = min(workers or os.cpu_count() or 1, max(len(trajs) // 8, 1))
    if workers > 1:
        # Workers are forked with the rows in memory (no observation text is pickled), mine
        # chunks of one site's trajectories (so that each loads few site graphs) and send back
        # slim results, put back in one-process order.
        global _ROWS_BY_TRAJ
        _ROWS_BY_TRAJ = by_traj
        chunks = site_chunks(by_traj, trajs, max(1, -(-len(trajs) // (workers * 4))))
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool, \
                    progress(len(trajs), f"{STAGE} mining", unit="traj", enabled=show_progress) as bar:
                for (part, tallies), chunk in zip(pool.map(_mine_chunk, [(str(run.root), config, c) for c in chunks]),
                                                  chunks):
                    pending += part
                    miner.absorb(tallies)
                    bar.update(len(chunk))
        finally:
            _ROWS_BY_TRAJ = None
        in_trajectory_order(miner, pending)
    else:
        with progress(len(trajs), f"{STAGE} mining", unit="traj", enabled=show_progress) as bar:
            for traj in trajs:
                pending += miner.trajectory(by_traj[traj])
                bar.update(1)
    return write_pool(run, config, rows, miner, pending, llm_config, show_progress, t0, workers)


def write_pool(run: RunDir, config: MineConfig, rows: list[dict], miner: Miner, pending: list[_Pending],
               llm_config, show_progress: bool, t0: float, workers: int = 1) -> StageStats:
    """What follows the rules: the fill values (each distinct prompt asked once, through the LLM
    cache), the last checks, the pool and its seeded sample, the audit (its observations parsed
    by ``workers`` forked processes) and the stage's stats and rejects (``rows``: the run's rows,
    for the WebPRM rejected-action audit; ``t0``: the stage's start)."""
    if llm_config is None:
        from llm import LLMConfig
        llm_config = LLMConfig()
    usage, fill_counts = miner.complete_fills(pending, llm_config, show_progress)

    cands = []
    seen: dict[tuple, set] = defaultdict(set)
    for p in pending:
        row = p.row
        if p.value_source == "llm" and p.value is None:
            if p.infra:
                miner.drop("fill_value_unavailable", row, f"{p.rule}: {p.infra}", p.rule)
            else:
                miner.drop(f"fill_invalid_{p.fill_error}", row,
                           f"{p.rule}: no valid value for {p.proposal.node} after {FILL_ATTEMPTS} answers", p.rule)
            continue
        bid = p.proposal.bid
        if p.proposal.action is not None:
            action = p.proposal.action.with_bid(bid)
        else:
            action = _make(p.op, bid, p.value)
        neg = action.to_string()
        key = (row["traj_id"], row["step_idx"])
        if p.value_source == "llm":     # checks deferred until the value existed
            if neg == p.ctx_pos:
                miner.drop("equals_positive", row, f"{p.rule}: {neg}", p.rule)
                continue
            if neg in seen[key]:
                miner.drop("duplicate_negative", row, f"{p.rule}: {neg}", p.rule)
                continue
        seen[key].add(neg)
        gmcp = p.pos_kind == NodeKind.ELEMENT and p.pos_op == action.op
        cands.append({
            "pair_id": _pair_id(row, p.rule, neg), "site": row["site"], "traj_id": row["traj_id"],
            "task_id": row["task_id"], "step_idx": row["step_idx"], "rule": p.rule, "axis": AXIS_OF[p.rule],
            "action_pos": p.ctx_pos, "action_neg": neg, "gmcp": gmcp, "sampled": False,
            "pos_kind": p.pos_kind, "pos_bid": p.pos_bid, "pos_node": p.pos_node, "neg_bid": bid,
            "neg_node": p.proposal.node, "op_pos": p.pos_op, "op_neg": action.op, "value_source": p.value_source,
            "evidence": json.dumps({**p.proposal.evidence, **({"also_fired": p.also_fired} if p.also_fired else {})},
                                   sort_keys=True, ensure_ascii=False),
            "mode": "no_graph" if config.no_graph else "graph"})
    cands.sort(key=lambda c: c["pair_id"])
    rng = random.Random(config.seed)
    for i in rng.sample(range(len(cands)), min(config.sample_size, len(cands))):
        cands[i]["sampled"] = True
    atomic_write_parquet(run.candidates, pinned_table(cands, CANDIDATE_SCHEMA))

    stats = StageStats(STAGE, n_in=miner.proposed, n_out=len(cands), rejected=miner.drops)
    out_by_rule = Counter(c["rule"] for c in cands)
    rules = {}
    for rule in config.rules:
        dropped = {reason: n for (r, reason), n in sorted(miner.rule_drops.items()) if r == rule}
        rules[rule] = {"in": miner.rule_in[rule], "out": out_by_rule[rule], "rejected": dropped}
        assert rules[rule]["in"] == rules[rule]["out"] + sum(dropped.values()), (rule, rules[rule])
    stats.extra = {
        "config": {"sample_size": config.sample_size, "seed": config.seed, "axes": list(config.axes),
                   "no_graph": config.no_graph, "max_per_rule": config.max_per_rule,
                   "params": {k: getattr(config.params, k) for k in config.params.__slots__}},
        # Per rule: candidates looked at (in), candidates written (out), and what grounding and
        # the later value checks removed, by reason (in = out + rejected for every rule).
        "rules": rules,
        # Where the grounded negatives' ops came from; 'remapped': the role's fill on a control
        # that cannot take text, clicked instead (App. F). Counted before LLM fill values.
        "ops": dict(sorted(miner.op_sources.items())),
        # Demonstrated steps of successful trajectories: mined, or not (by reason, in rejects.jsonl).
        "steps": {"in": miner.steps_in, "out": miner.steps_mined, "rejected": dict(sorted(miner.step_rejected.items()))},
        # Re-derived from the files just written, as ``python -m proposals.audit`` does.
        "audit": write_audit(run.root, "candidates", workers),
        "fill": fill_counts,
        "llm": usage,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    webprm = audit_webprm_rejected(rows)
    if webprm["pairs"]:
        stats.extra["webprm_rejected_audit"] = webprm
    assert miner.steps_in == miner.steps_mined + sum(miner.step_rejected.values())
    run.write_stage(stats, miner.step_rejects + miner.rejects)
    return stats



# -- per site (the propose-negatives flow's tasks, on Dask) ------------------------------------------
def site_trajectories(run: RunDir) -> dict[str, list[str]]:
    """The successful trajectories of each site (a trajectory's site: its first step's), sorted,
    from four light columns: what the flow hands its per-site tasks."""
    with reading(run.trajectories, INGEST):
        rows = pq.read_table(run.trajectories, columns=["site", "traj_id", "step_idx", "success"]).to_pylist()
    by_traj, trajs = successful_trajectories(rows)
    sites: dict[str, list[str]] = defaultdict(list)
    for traj in trajs:
        sites[by_traj[traj][0]["site"]].append(traj)
    return dict(sorted(sites.items()))


def mine_site(run_dir: str | Path, config: MineConfig, traj_ids: list[str]) -> tuple[list[_Pending], tuple]:
    """The rules over one site's successful trajectories ``traj_ids`` (their rows read here), grounded:
    the negatives still pending and the miner's tallies. Fill values are left to
    :func:`write_sites`, which asks each distinct prompt once for the whole run."""
    run = RunDir(run_dir)
    by_traj, trajs = successful_trajectories(load_rows(run, filters=[("traj_id", "in", list(traj_ids))]))
    miner = Miner(run, config)
    pending: list[_Pending] = []
    for traj in trajs:
        pending += miner.trajectory(by_traj[traj])
    return pending, miner.tallies()


def write_sites(run: RunDir, config: MineConfig, results: list[tuple[list[_Pending], tuple]], llm_config,
                show_progress: bool, t0: float) -> StageStats:
    """:func:`write_pool` on the sites' results (``mine_site``), put back in the order a one-process
    run mines in (a stable sort by trajectory id: each trajectory is mined whole, in step order, by
    one site), so the fill requests, the pool, the sample, the stats and the rejects are the same."""
    miner = Miner(run, config)
    pending: list[_Pending] = []
    for part, tallies in results:
        pending += part
        miner.absorb(tallies)
    in_trajectory_order(miner, pending)
    webprm = load_rows(run, filters=[("source", "==", "webprm")])      # the one audit that reads rows
    return write_pool(run, config, webprm, miner, pending, llm_config, show_progress, t0)

def format_audit(stats: StageStats) -> str:
    """The stage summary and its audit, as text."""
    lines = [stats.summary(), format_table_audit(stats.extra["audit"])]
    w = stats.extra.get("webprm_rejected_audit")
    if w:
        lines.append(f"WebPRM rejected actions on the same steps: {w['pairs']} pairs, GMCP {w['gmcp_ratio']:.2%}, "
                     f"hallucinated {w['hallucinated_targets']}")
    return "\n".join(lines)


def done_summary(stats: StageStats, run_dir: str | Path) -> str:
    """The command's last line: the pool, the sample, the time, the file written."""
    e = stats.extra
    sampled = min(e["config"]["sample_size"], stats.n_out)
    return done_line(STAGE, f"{stats.n_out} candidates ({sampled} sampled for the teacher) from "
                            f"{e['steps']['out']} steps", e["seconds"], f"wrote {RunDir(run_dir).candidates}")


@dataclass
class MineCommand(Configurable):
    """What ``python -m proposals.mine`` (and the ``propose-negatives`` flow) runs on and how it
    shows progress; the mining itself is :class:`MineConfig`."""

    ARG_GROUP = "command"

    run: str = field(metadata={"help": "run directory holding trajectories.parquet and the graphs"})
    workers: int | None = field(default=None, metadata={"min": 1, "help": "processes (default: one per core)"})
    quiet: bool = field(default=False, metadata={"help": "no progress bars"})


def build_parser(prog: str = "python -m proposals.mine", doc: str = __doc__):
    """The command's flags (``data.config``): ``MineCommand``, ``MineConfig`` with the rules'
    ``Params`` (``--sample-size``, ``--seed``, ``--axes``, ``--near-hops``, ...) and the fill
    model's ``LLMConfig`` under ``--fill-``."""
    from llm import LLMConfig

    ap = make_parser(prog, doc)
    MineCommand.add_args(ap)
    MineConfig.add_args(ap)
    LLMConfig.add_args(ap, prefix="fill-")   # the model that completes fill values
    return ap


def main(argv: list[str] | None = None) -> int:
    from llm import LLMConfig

    args = build_parser().parse_args(argv)
    cmd = MineCommand.from_args(args)
    try:
        stats = mine(cmd.run, MineConfig.from_args(args), LLMConfig.from_args(args, prefix="fill-"),
                     workers=cmd.workers, show_progress=not cmd.quiet)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_audit(stats))
    print(done_summary(stats, cmd.run))
    return 0 if stats.n_out else 1


if __name__ == "__main__":
    sys.exit(main())
