"""The pool: the miners over a run's successful trajectories in chunks (in fresh processes, or one
task per chunk on the flow's Dask cluster), each spooling its final rows and rejects to disk
(``proposals.spool``), then once for the whole run the fill values, the last checks, the seeded
sample, ``candidates.parquet`` (merged from the spools in ``pair_id`` order), the audit and the
stage's stats and rejects.
"""

from __future__ import annotations

import gc
import json
import os
import random
import time
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import proposals.spool
from cli.progress import progress
from data.memory import arrow_allocator, fresh_processes, release_memory
from data.rundir import RunDir, StageStats
from data.schema import AXIS_OF, CANDIDATE_SCHEMA
from graph.build import PLAN_BATCH
from graph.identity import NodeKind
from graph.parsed import Parsed
from graph.schema import check_outputs, pinned_table, reading, require_columns
from proposals.affordance import FILL_ATTEMPTS
from proposals.audit import audit_webprm_rejected, write_audit_apart
from proposals.config import STAGE, MineConfig
from proposals.fill import complete_fills
from proposals.gmcp_ratio import TOLERANCE, match_gmcp_ratio, share
from proposals.graphindex import check_graphs
from proposals.grounding import COLUMNS, INGEST, Miner, Pending, _make, _pair_id, chunk_rows, webprm_rows
from proposals.spool import ChunkSpool, light_columns, merged_rejects, out_by_rule, spool_dir, write_sorted_apart

# A job's trajectories are mined in runs of at most this many observations (and at least one
# trajectory): what a worker holds at once (rows, parsed trees) does not grow with the pool (a site of
# the paper's job at 10x holds ~1,700; a site of its 1x pool ~160, so a chunk of 256 holds about as
# much as a whole 1x site: at 10x, 256 rows against 512 cut a site's job from 260 to 235 MB for ~5% CPU).
CHUNK_ROWS = 256
ROW_GROUP = 65536       # rows of a row group of ``candidates.parquet`` (a pool up to this size: one, as before)


def mine_chunk(run_root: str, config: MineConfig, site: str, trajs: dict[str, int],
               spool: str, run_rows: int | None = None,
               batch: int | None = None) -> tuple[list[Pending], tuple, dict]:
    """Mine one chunk of a site's trajectories (trajectory -> its rows), in a fresh worker of
    :func:`mine` or a task of the propose-negatives flow on Dask. The rows of every step whose
    negatives are final (none waits for an LLM fill value) and the chunk's rejects go to files in
    the ``spool`` folder as they are mined (``proposals.spool``); returns the negatives of the
    steps that wait for fill values (asked for the whole run by :func:`write_pool`), the miner's
    tallies and the spool's files. The rows and the parsed observations are read ``run_rows``
    (default ``CHUNK_ROWS``) at a time, the rows spooled ``batch`` (default ``spool.BATCH``) at a
    time; the site's graph and parsed lines once for the chunk: what a worker holds does not grow
    with the pool."""
    run = RunDir(run_root)
    arrow_allocator()     # in a Dask worker too
    miner = Miner(run, config)
    out = ChunkSpool(spool, batch)
    lines: dict = {}
    held: list[Pending] = []
    without = WithoutCandidates()
    for part in row_runs(trajs, run_rows or CHUNK_ROWS):
        if not config.no_graph:
            miner.parsed = Parsed(run_root, trajs=list(part), lines=lines)
        by_traj = chunk_rows(run, site, part)
        # The cycle collector paused: mining allocates millions of short-lived objects (freed by
        # reference counting) and each collection walked the rows too (~14% of the mining's CPU
        # time on the paper-scale pool).
        gc.disable()
        try:
            for traj in part:
                m0 = len(miner.mined)
                held += spool_final(miner, config, miner.trajectory(by_traj[traj]), out, without, m0)
        finally:
            gc.enable()
        del by_traj
        out.add_rejects(miner.step_rejects, miner.tally.rejects)
        miner.trim_memos()
        release_memory()
    return held, (*miner.tallies(), without), out.close()


def spool_final(miner: Miner, config: MineConfig, pending: list[Pending], out: ChunkSpool,
                without: WithoutCandidates, m0: int) -> list[Pending]:
    """One trajectory's negatives (its steps: ``miner.mined[m0:]``): the rows of the steps whose
    negatives are final go to ``out`` (those steps counted in ``without``); the steps with a negative
    that waits for a fill value (or a spare for one) are returned whole, their steps left in
    ``miner.mined`` (counted once their values are known).
    A final negative is never dropped by :func:`candidate_row` (its checks were made at grounding)."""
    steps: dict[tuple, list[Pending]] = {}
    for p in pending:
        steps.setdefault((p.row["traj_id"], p.row["step_idx"]), []).append(p)
    held, final = [], set()
    row_of = candidate_row(miner, config)
    for key, ps in steps.items():
        if any(p.value_source == "llm" or p.spare is not None for p in ps):
            held += ps
            continue
        final.add(key)
        for p in ps:
            row = row_of(p)
            assert row is not None, (key, p.rule)     # no check is deferred for a final negative
            out.add_row(row)
    mined = miner.mined[m0:]
    del miner.mined[m0:]
    for m in mined:
        if (m[0], m[1]) in steps and (m[0], m[1]) not in final:
            miner.mined.append(m)
        else:
            without.add(m, (m[0], m[1]) in final)
    return held


def row_runs(trajs: dict[str, int], max_rows: int) -> list[dict[str, int]]:
    """``trajs`` (trajectory -> rows) cut, in order, into runs of at most ``max_rows`` rows (a
    longer trajectory: a run of its own)."""
    runs: list[dict[str, int]] = [{}]
    for traj, rows in trajs.items():
        if runs[-1] and sum(runs[-1].values()) + rows > max_rows:
            runs.append({})
        runs[-1][traj] = rows
    return runs


def open_run(run_dir: str | Path, config: MineConfig) -> RunDir:
    """The run directory to mine, checked (inputs, graphs, writable outputs) and locked for this stage."""
    run = RunDir(run_dir)
    if not run.trajectories.exists():
        raise FileNotFoundError(f"{run.trajectories} not found: run `python -m data.ingest` first")
    arrow_allocator()
    if not config.no_graph and not run.graph_manifest.exists():
        raise FileNotFoundError(f"{run.root / 'graphs'} not found: run `python -m graph.build` first "
                                f"(or mine with --no-graph)")
    run.check_inputs(STAGE, run.trajectories, *(() if config.no_graph else (run.graphs,)))   # same upstream run
    check_outputs(run, files=("candidates.parquet", "audit/candidates.json"), dirs=("audit",))
    require_columns(run.trajectories, COLUMNS, INGEST)      # before the work: each chunk reads its own rows
    if not config.no_graph:
        check_graphs(run)      # the graph tables open (the trajectories: in load_rows)
    return run


def plan_chunks(trajs: dict[str, tuple[str, int]], size: int) -> list[tuple[str, dict[str, int]]]:
    """The trajectories (trajectory -> its site and rows) in chunks of at most ``size`` of one site,
    as (site, {trajectory: rows}), the chunks with the most rows first (they are handed out in order)."""
    sites: dict[str, list[str]] = defaultdict(list)
    for traj, (site, _) in trajs.items():
        sites[site].append(traj)
    chunks = [(site, ts[i:i + size]) for site, ts in sites.items() for i in range(0, len(ts), size)]
    chunks.sort(key=lambda c: -sum(trajs[t][1] for t in c[1]))
    return [(site, {t: trajs[t][1] for t in ts}) for site, ts in chunks]


def plan_trajectories(run: RunDir) -> dict[str, tuple[str, int]]:
    """The successful trajectories, sorted, each with its site (its first step's) and its number
    of rows, from three light columns (no observation is read)."""
    first: dict[str, tuple[int, str, bool]] = {}
    count: Counter = Counter()
    # 8,192 rows at a time: the mining process holds no column whole
    with reading(run.trajectories, INGEST), pq.ParquetFile(run.trajectories) as f:
        for batch in f.iter_batches(PLAN_BATCH, columns=["traj_id", "step_idx", "site", "success"]):
            d = batch.to_pydict()
            count.update(d["traj_id"])
            for traj, step, site, ok in zip(d["traj_id"], d["step_idx"], d["site"], d["success"]):
                if traj not in first or step < first[traj][0]:
                    first[traj] = (step, site, ok)
    plan = {t: (first[t][1], count[t]) for t in sorted(first) if first[t][2]}
    del first, count
    release_memory()
    return plan


def in_trajectory_order(miner: Miner, pending: list[Pending]) -> None:
    """Results of trajectories mined in any order put back in the order of a one-process run (a
    stable sort by trajectory id: each trajectory is mined whole, in step order, by one miner).
    The chunks' rejects are not among them: they are spooled, and merged in that order on reading
    (``proposals.spool.merged_rejects``)."""
    pending.sort(key=lambda p: p.row["traj_id"])
    miner.mined.sort(key=lambda m: m[0])


def mine(run_dir: str | Path, config: MineConfig | None = None, llm_config=None,
         workers: int | None = None, show_progress: bool = True) -> StageStats:
    """Mine the full candidate pool of a run; write ``candidates.parquet`` and the audit
    (``show_progress``: bars of the trajectories mined and the fill values asked, on stderr)."""
    config = config or MineConfig()
    run = open_run(run_dir, config)
    t0 = time.perf_counter()
    trajs = plan_trajectories(run)
    workers = min(workers or os.cpu_count() or 1, max(len(trajs) // 8, 1))
    # Chunks of one site's trajectories, each reading its own rows (the site's row groups, CHUNK_ROWS
    # at a time: the pool is never held whole) and loading the site's graph once; results put back
    # in trajectory order.
    chunks = plan_chunks(trajs, max(1, -(-len(trajs) // (workers * 4))))
    with spool_dir(run.root) as spool:
        jobs = [(str(run.root), config, site, c, str(spool), CHUNK_ROWS, proposals.spool.BATCH)
                for site, c in chunks]
        results = []
        with progress(len(trajs), f"{STAGE} mining", unit="traj", enabled=show_progress) as bar:
            if workers > 1:
                # fresh workers (not forks of this process: its plan, its Arrow allocator) that mine
                # chunk after chunk: at 10x the paper's pool 229 -> 172 MB each
                with fresh_processes(["proposals.pool"], tasks_per_process=None) as imap:
                    for result, (_, chunk) in zip(imap(_mine_job, jobs, workers), chunks):
                        results.append(result)
                        bar.update(len(chunk))
            else:
                for job, (_, chunk) in zip(jobs, chunks):
                    results.append(mine_chunk(*job))
                    bar.update(len(chunk))
        return write_chunks(run, config, results, llm_config, show_progress, t0, workers)


def _mine_job(args):
    return mine_chunk(*args)


def write_chunks(run: RunDir, config: MineConfig, results: list[tuple[list[Pending], tuple, dict]], llm_config,
                 show_progress: bool, t0: float, workers: int = 1) -> StageStats:
    """:func:`write_pool` on the chunks' results (``mine_chunk``, in any order; their spools still
    on disk), put back in the order a one-process run mines in (a stable sort by trajectory id:
    each trajectory is mined whole, in step order, by one chunk), so the fill requests, the pool,
    the sample, the stats and the rejects do not depend on the chunks or on where they ran."""
    miner = Miner(run, config)
    held: list[Pending] = []
    spools: list[dict] = []
    without = WithoutCandidates()
    for part, (*tallies, chunk_without), files in results:
        held += part
        miner.absorb(tuple(tallies))
        without.absorb(chunk_without)
        spools.append(files)
    results.clear()
    in_trajectory_order(miner, held)
    return write_pool(run, config, webprm_rows(run), miner, held, spools, without, llm_config, show_progress, t0,
                      workers)


def write_pool(run: RunDir, config: MineConfig, rows: list[dict], miner: Miner, pending: list[Pending],
               spools: list[dict], without: WithoutCandidates, llm_config, show_progress: bool, t0: float,
               workers: int = 1) -> StageStats:
    """What follows the rules: the fill values of the steps that wait for them (each distinct
    prompt asked once, through the LLM cache) and their last checks, the pool sorted by
    ``pair_id`` from the chunks' spools and those steps' rows, its seeded sample, the audit (in a
    fresh process; its observations parsed by ``workers`` forked processes when the graphs did not
    parse them) and the stage's stats and rejects
    (``rows``: the run's rows, for the WebPRM rejected-action audit; ``t0``: the stage's start)."""
    if llm_config is None:
        from llm import LLMConfig
        llm_config = LLMConfig()
    kept = [p for p in pending if p.spare is None]
    usage, fill_counts = complete_fills(kept, llm_config, config.seed, show_progress,
                                        replace=spares_for(miner, pending, kept))
    pending.clear()
    have = set()
    # The filled steps' rows spooled too, BATCH rows converted at a time, each step's as soon as its
    # last negative is through (gathered first, they cost the mining process +50 MB at 10x the
    # paper's pool, 30,000 steps). No chunk (no spool folder) means no mined row: the filled ones,
    # if any, stay in memory.
    folder = Path(spools[0]["step_rejects"]).parent if spools else None
    out, filled = (ChunkSpool(folder), None) if folder is not None else (None, [])
    for c in filled_rows(kept, candidate_row(miner, config)):
        have.add((c["traj_id"], c["step_idx"]))
        if out is not None:
            out.add_row(c)
        else:
            filled.append(c)
    for m in miner.mined:
        without.add(m, (m[0], m[1]) in have)
    miner.mined.clear()
    filled_src = out.close()["rows"] if out is not None else pinned_table(filled, CANDIDATE_SCHEMA)
    sources = [s["rows"] for s in spools if s["rows"]] + ([filled_src] if filled_src is not None else [])
    del filled, have
    release_memory()

    # The pool in pair_id order from a few light columns; the rows themselves are gathered a row
    # group at a time from the spools (proposals.spool.write_sorted, in a fresh process for a pool
    # of several row groups): never held whole.
    per_step = bool(config.sample_per_step or config.sample_min_per_step)
    light = light_columns(sources, ["pair_id", "rule"] + (
        ["traj_id", "step_idx", "gmcp", "action_neg"] if per_step or config.pool_gmcp_ratio is not None else []))
    order = pc.sort_indices(light.column("pair_id"))
    cands = light.take(order).to_pylist() if per_step or config.pool_gmcp_ratio is not None else None
    ratio_entry: dict = {}
    if config.pool_gmcp_ratio is not None:
        at = {id(c): j for j, c in enumerate(cands)}
        cands, ratio_entry = to_gmcp_ratio(miner, cands, config)
        order = order.take(pa.array([at[id(c)] for c in cands], pa.int64()))
    rng = random.Random(config.seed)
    eligible = per_step_sample(cands, config) if per_step else range(len(order))
    sampled = set(rng.sample(eligible, min(config.sample_size, len(eligible))))
    write_sorted_apart(run.candidates, sources, array("q", order.to_pylist()), sampled, ROW_GROUP, folder)
    rules = rule_counts(config, miner, out_by_rule(light, order))
    n_out = len(order)
    del light, order, cands, sampled
    release_memory()

    stats = StageStats(STAGE, n_in=miner.tally.proposed, n_out=n_out, rejected=miner.tally.drops)
    stats.extra = {
        "config": {"sample_size": config.sample_size, "seed": config.seed, "selection": config.selection,
                   "axes": list(config.axes),
                   "no_graph": config.no_graph, "no_fill": config.no_fill, "max_per_rule": config.max_per_rule,
                   "pool_gmcp_ratio": config.pool_gmcp_ratio,
                   **({"sample_per_step": config.sample_per_step, "sample_min_per_step": config.sample_min_per_step}
                      if per_step else {}),
                   "params": {k: getattr(config.params, k) for k in config.params.__slots__}},
        # Per rule: candidates looked at (in), candidates written (out), and what grounding and
        # the later value checks removed, by reason (in = out + rejected for every rule).
        "rules": rules,
        # Where the grounded negatives' ops came from; 'remapped': the role's fill on a control
        # that cannot take text, clicked instead (App. F). Counted before LLM fill values.
        "ops": dict(sorted(miner.tally.op_sources.items())),
        # Demonstrated steps of successful trajectories: mined, or not (by reason, in rejects.jsonl).
        "steps": {"in": miner.steps_in, "out": miner.steps_mined,
                  "rejected": dict(sorted(miner.step_rejected.items()))},
        # Mined steps that gave no candidate, by why (the line a near-empty pool prints).
        "without_candidates": without.as_dict(),
        # Re-derived from the files just written, as ``python -m proposals.audit`` does (in a fresh process).
        "audit": write_audit_apart(run.root, "candidates", workers),
        "fill": fill_counts,
        **ratio_entry,
        "llm": usage,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    webprm = audit_webprm_rejected(rows)
    if webprm["pairs"]:
        stats.extra["webprm_rejected_audit"] = webprm
    assert miner.steps_in == miner.steps_mined + sum(miner.step_rejected.values())
    # The chunks' rejects (spooled, merged in trajectory order), then those of the fills and last checks.
    run.write_stage(stats, chain(merged_rejects(spools, "step_rejects"), merged_rejects(spools, "rejects"),
                                 miner.step_rejects, miner.tally.rejects))
    return stats


def per_step_sample(cands: list[dict], config: MineConfig) -> range | list[int]:
    """The indices of ``cands`` the teacher's sample draws from: all of them, or with
    ``sample_per_step``/``sample_min_per_step`` a seeded draw of at most N per step from the steps
    with at least M candidates (seeded by the step, so that it does not move when others change)."""
    if not (config.sample_per_step or config.sample_min_per_step):
        return range(len(cands))
    by_step: dict[tuple, list[int]] = defaultdict(list)
    for i, c in enumerate(cands):
        by_step[(c["traj_id"], c["step_idx"])].append(i)
    out = []
    for (traj, step), idx in by_step.items():
        if len(idx) >= config.sample_min_per_step:
            n = min(config.sample_per_step or len(idx), len(idx))
            out += random.Random(f"{config.seed}/{traj}/{step}").sample(idx, n)
    return sorted(out)


def spares_for(miner: Miner, pending: list[Pending], kept: list[Pending]):
    """``complete_fills``' ``replace``: a negative whose fill failed gives its slot to its rule's
    next spare at that step (``Miner.spares``), which joins ``kept`` and whose counts are added."""
    spares: dict[tuple, list[Pending]] = defaultdict(list)
    for p in reversed(pending):
        if p.spare is not None:
            spares[(p.row["traj_id"], p.row["step_idx"], p.rule)].append(p)

    def replace(failed: list[Pending]) -> list[Pending]:
        out = []
        for p in failed:
            left = spares[(p.row["traj_id"], p.row["step_idx"], p.rule)]
            if left:
                out.append(left.pop())
                miner.tally.add(out[-1].spare)
        kept.extend(out)
        return out
    return replace


def filled_rows(kept: list[Pending], row_of) -> Iterator[dict]:
    """The rows (``row_of``: :func:`candidate_row`) of the negatives that waited for fill values, a
    step's once its last negative is through (a later duplicate adds its rule to an earlier row's
    ``rules``); ``kept`` holds each step's negatives together (:func:`spool_final` holds a step
    whole) and is emptied as it is read."""
    step, rows = None, []
    for i, p in enumerate(kept):
        kept[i] = None
        key = (p.row["traj_id"], p.row["step_idx"])
        if key != step:
            yield from rows
            step, rows = key, []
        row = row_of(p)
        if row is not None:
            rows.append(row)
    yield from rows
    kept.clear()


def candidate_row(miner: Miner, config: MineConfig):
    """A function from a pending negative, its value now known, to its ``candidates.parquet`` row,
    or None when its fill failed or its value makes it equal to the positive or to an earlier
    negative of its step (dropped with the reason, its rule added to that negative's ``rules``).
    A step's negatives are given one after another (only the current step's rows are remembered).
    ``rule`` is the rule that kept the negative (the first in ``RULES`` order to draw it, unless
    it replaced a failed fill), ``rules`` every rule that drew it."""
    seen: dict[str, dict] = {}       # the current step's negatives by action (a step's come together)
    step: tuple | None = None

    def row_of(p: Pending) -> dict | None:
        nonlocal step
        row = p.row
        key = (row["traj_id"], row["step_idx"])
        if key != step:
            seen.clear()
            step = key
        if p.value_source == "llm" and p.value is None:
            if p.infra:
                miner.drop("fill_value_unavailable", row, f"{p.rule}: {p.infra}", p.rule)
            else:
                miner.drop(f"fill_invalid_{p.fill_error}", row,
                           f"{p.rule}: no valid value for {p.proposal.node} after {FILL_ATTEMPTS} answers", p.rule)
            return None
        bid = p.proposal.bid
        action = p.proposal.action.with_bid(bid) if p.proposal.action is not None else _make(p.op, bid, p.value)
        neg = action.to_string()
        if p.value_source == "llm" or p.spare is not None:     # checks deferred until the value existed
            if neg == p.ctx_pos:
                miner.drop("equals_positive", row, f"{p.rule}: {neg}", p.rule)
                return None
            if neg in seen:
                miner.drop("duplicate_negative", row, f"{p.rule}: {neg}", p.rule)
                seen[neg]["rules"] = list(dict.fromkeys(seen[neg]["rules"] + [p.rule, *p.also_fired]))
                return None
        seen[neg] = out = {
            "pair_id": _pair_id(row, p.rule, neg), "site": row["site"], "traj_id": row["traj_id"],
            "task_id": row["task_id"], "step_idx": row["step_idx"], "rule": p.rule, "axis": AXIS_OF[p.rule],
            "action_pos": p.ctx_pos, "action_neg": neg,
            "gmcp": p.pos_kind == NodeKind.ELEMENT and p.pos_op == action.op, "sampled": False,
            "pos_kind": p.pos_kind, "pos_bid": p.pos_bid, "pos_node": p.pos_node, "neg_bid": bid,
            "neg_node": p.proposal.node, "op_pos": p.pos_op, "op_neg": action.op, "value_source": p.value_source,
            "evidence": json.dumps({**p.proposal.evidence, **({"also_fired": p.also_fired} if p.also_fired else {})},
                                   sort_keys=True, ensure_ascii=False),
            "mode": "no_graph" if config.no_graph else "graph", "rules": list(dict.fromkeys([p.rule, *p.also_fired]))}
        return out
    return row_of


class WithoutCandidates:
    """The mined steps that gave no candidate, by why: the positive acts on no element
    (``virtual_positive``, its ops in ``virtual_positive_ops``: no rule contrasts an element with
    it), no rule put a candidate forward (``no_candidate``), or grounding and the value checks
    removed all they put forward (``all_dropped``). Counted as chunks are mined, in any order:
    ops of equal counts are listed in trajectory order, as one pass over the pool lists them."""

    def __init__(self):
        self.why: Counter = Counter()
        self.virtual_ops: Counter = Counter()
        self.first: dict[str, tuple] = {}       # op -> the first (traj_id, step_idx) it was seen at

    def add(self, mined: tuple, has_candidates: bool) -> None:
        traj, step, kind, op, looked = mined
        if has_candidates:
            return
        if kind == NodeKind.VIRTUAL:
            self.why["virtual_positive"] += 1
            self.virtual_ops[op] += 1
            self.first[op] = min(self.first.get(op, (traj, step)), (traj, step))
        else:
            self.why["all_dropped" if looked else "no_candidate"] += 1

    def absorb(self, other: WithoutCandidates) -> None:
        self.why.update(other.why)
        self.virtual_ops.update(other.virtual_ops)
        for op, at in other.first.items():
            self.first[op] = min(self.first.get(op, at), at)

    def as_dict(self) -> dict:
        ops = sorted(self.virtual_ops.items(), key=lambda kv: (-kv[1], self.first[kv[0]]))
        return {"steps": dict(sorted(self.why.items())), "virtual_positive_ops": dict(ops)}


def to_gmcp_ratio(miner: Miner, cands: list[dict], config: MineConfig) -> tuple[list[dict], dict]:
    """``--pool-gmcp-ratio R``: the largest seeded subset of the pool whose GMCP share is R within the
    tolerance (``proposals.gmcp_ratio``), the rows dropped with the reason ``gmcp_ratio``, and the
    ``stats.json`` entry (target, shares before and after, rows dropped per class); else all."""
    if config.pool_gmcp_ratio is None or not cands:
        return cands, {}
    ratio = config.pool_gmcp_ratio
    kept, dropped = match_gmcp_ratio(cands, ratio, config.seed, flag="--pool-gmcp-ratio")
    for c in dropped:
        miner.drop("gmcp_ratio", c, f"{c['rule']}: {'GMCP' if c['gmcp'] else 'non-GMCP'} {c['action_neg']} dropped "
                                    f"to reach a GMCP share of {ratio}", c["rule"])
    return kept, {"gmcp_ratio": {"target": ratio, "tolerance": TOLERANCE, "share_before": share(cands),
                                 "share_after": share(kept), "dropped_gmcp": sum(c["gmcp"] for c in dropped),
                                 "dropped_other": sum(not c["gmcp"] for c in dropped)}}


def rule_counts(config: MineConfig, miner: Miner, out_by_rule: Counter) -> dict:
    """Per rule: candidates looked at (in), written (out: ``out_by_rule``) and dropped by reason;
    in = out + rejected."""
    rules = {}
    for rule in config.rules:
        dropped = {reason: n for (r, reason), n in sorted(miner.tally.rule_drops.items()) if r == rule}
        rules[rule] = {"in": miner.tally.rule_in[rule], "out": out_by_rule[rule], "rejected": dropped}
        assert rules[rule]["in"] == rules[rule]["out"] + sum(dropped.values()), (rule, rules[rule])
    return rules
