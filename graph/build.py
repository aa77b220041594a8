"""Build one Interaction Element Graph per site from a run's trajectories.

    python -m graph.build --run RUN [--identity paper|ours] [--containment paper|ours] [--include-failed]
                          [--workers N] [--max-depth N] [--max-nodes N]

Reads ``RUN/trajectories.parquet``; writes ``RUN/graphs/<site>/nodes.parquet``,
``RUN/graphs/<site>/edges.parquet``, ``RUN/graphs/<site>/steps.parquet`` (where each demonstrated
step landed: node, op, page; ``proposals.mine`` reads it), ``RUN/graphs/<site>/parsed.parquet`` and
``parsed_lines.parquet`` (each observation as parsed and resolved, which the later stages read
instead of parsing it again: :mod:`graph.parsed`), ``RUN/graphs/manifest.json``
(per-site statistics in the paper's terms) and the ``graph.build`` entry of ``stats.json``.
Each site is built in passes (:mod:`graph.passes`) into an :class:`InteractionElementGraph`.
Observations of unsuccessful trajectories are left out by default (``--include-failed`` keeps
them, for analysis); every observation or step left out is written to ``rejects.jsonl`` with its
reason. ``--identity`` chooses the persistent identity (App. B's ``paper``, the default, or ``ours``; see
:mod:`graph.identity`) and ``--containment`` which ancestors E_s links an element to (see
``graph.identity.CONTAINMENTS``), both recorded in the manifest; an observation past
``--max-nodes`` nodes or
``--max-depth`` levels is rejected as ``too_large`` / ``too_deep`` (ingest keeps its row).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import shutil
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cli.config import Configurable, check_ranges, make_parser
from cli.errors import error_exit
from data.loss import stage_loss_line
from data.memory import arrow_allocator, fresh_processes, release_memory
from data.rundir import (
    Reject,
    RejectSpool,
    RunDir,
    RunDirError,
    StageStats,
    atomic_parquet_writer,
    atomic_write_parquet,
    atomic_write_text,
)
from data.schema import int32_array
from graph import passes
from graph.identity import (
    CONTAINMENTS,
    DEFAULT_CONTAINMENT,
    DEFAULT_IDENTITY,
    IDENTITIES,
    check_containment,
    check_identity,
)
from graph.parsed import LINE_SCHEMA, LINES_FILE, LINES_ROW_GROUP, OBS_FILE, OBS_ROW_GROUP, ParsedTables
from graph.passes import MAX_DEPTH, MAX_NODES, STAGE, next_urls
from graph.schema import EDGE_SCHEMA, NODE_SCHEMA, STEP_SCHEMA, check_outputs, pinned_table, reading, require_columns

INGEST = "python -m data.ingest"
COLUMNS = ["traj_id", "task_id", "step_idx", "site", "url", "observation", "obs_format", "html", "action",
           "action_error", "success"]


@dataclass
class BuildConfig(Configurable):
    """How ``graph.build`` builds; every field is a flag (``cli.config``)."""

    ARG_GROUP = "graph building"

    identity: str = field(default=DEFAULT_IDENTITY, metadata={
        "help": "persistent identity: paper (App. B: same-role sibling ordinal, chain without generic wrappers, "
                "names kept) or ours (same role-and-name ordinal, inert containers and content names left out)",
        "choices": IDENTITIES})
    containment: str = field(default=DEFAULT_CONTAINMENT, metadata={
        "help": "containment edges (E_s): paper (each element to the nearest control above it, as §4.1 counts them: "
                "past listbox, menu, grid, tablist, radiogroup, toolbar, grid cells and headers) or ours (to the "
                "nearest interactive ancestor, grouping widgets included)",
        "choices": CONTAINMENTS})
    include_failed: bool = field(default=False, metadata={"help": "also use unsuccessful trajectories"})
    workers: int | None = field(default=None, metadata={"help": "processes (default: one per core)",
                                                        "min": 1, "metavar": "N"})
    max_depth: int = field(default=MAX_DEPTH, metadata={
        "help": "reject an observation whose structure is deeper than this as too_deep (0: no limit)",
        "min": 0, "metavar": "N"})
    max_nodes: int = field(default=MAX_NODES, metadata={
        "help": "reject an observation of more AXTree nodes than this as too_large (0: no limit)",
        "min": 0, "metavar": "N"})

    def __post_init__(self):       # settings built in Python; the flags are checked when parsed
        check_identity(self.identity)
        check_containment(self.containment)
        check_ranges(self, "BuildConfig")

    def resolve_settings(self) -> dict:
        """What pass 1 needs (``passes.parse_and_resolve``'s keywords)."""
        return {"identity": self.identity, "max_depth": self.max_depth, "max_nodes": self.max_nodes}


def graph_settings(run: RunDir) -> dict:
    """How a run's graphs resolved their observations (``graphs/manifest.json``): ``identity``,
    ``max_depth`` and ``max_nodes``, as ``passes.observe`` takes them. Mining resolves O_t the same
    way, so that its node ids are the graph's and it skips the observations the build rejected. A
    manifest from before issue 22 names no identity: those graphs were built with ``ours``."""
    try:
        manifest = json.loads(run.graph_manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RunDirError(f"cannot read {run.graph_manifest}: {e} (rewrite it with `python -m graph.build`)") from None
    if not isinstance(manifest, dict):
        manifest = {"identity": None}
    try:
        # a manifest from before the limits existed: its graphs were built with none
        return BuildConfig(identity=manifest.get("identity", "ours"), max_depth=manifest.get("max_depth", 0),
                           max_nodes=manifest.get("max_nodes", 0)).resolve_settings()
    except ValueError as e:
        raise RunDirError(f"{run.graph_manifest}: {e} (rewrite it with `python -m graph.build`)") from None


def graph_identity(run: RunDir) -> str:
    """The identity a run's graphs were built with (see :func:`graph_settings`)."""
    return graph_settings(run)["identity"]


@dataclass(slots=True)
class InteractionElementGraph:
    """One site's Interaction Element Graph ``G = (V, E_s, E_tau)`` as the build produced it:
    the node and edge tables, the step-to-node mapping, statistics and rejects."""

    site: str
    nodes: pa.Table
    edges: pa.Table
    steps: pa.Table
    stats: dict
    rejects: list[Reject]
    parsed: tuple[pa.Table | None, pa.Table] | None = None    # graph.parsed's lines (None: written) and observations


def build_site(site: str, rows: list[dict], traj_steps: dict[str, list[tuple[int, str]]],
               config: BuildConfig | None = None) -> InteractionElementGraph:
    """Build the graph of ``site`` from its observations (already filtered by success, in
    (traj_id, step_idx) order), pass by pass (:mod:`graph.passes`). ``rows`` carry ``next_url``
    and ``traj_steps`` lists every trajectory's (step_idx, site): see :func:`site_plan`."""
    return build_site_chunks(site, trajectory_chunks(rows, CHUNK), traj_steps, config)


def build_site_chunks(site: str, chunks: Iterable[list[dict]], traj_steps: dict[str, list[tuple[int, str]]],
                      config: BuildConfig | None = None,
                      write_lines: Callable[[pa.Table], None] | None = None) -> InteractionElementGraph:
    """:func:`build_site` on the site's rows as chunks of whole trajectories (:func:`read_site_chunks`
    reads them a row group at a time: a site's rows are never held together). ``write_lines``:
    takes the parsed lines a row group at a time as they fill (``graph.parsed.ParsedTables``), and
    the graph's ``parsed`` then holds no lines table."""
    with without_gc():
        return _build_site(site, chunks, traj_steps, config, write_lines)


@contextlib.contextmanager
def without_gc():
    """Python's cycle collector off for the block (restored after it). A site's build allocates
    hundreds of thousands of small objects that stay alive until it ends (parsed trees, their
    contexts) and form no reference cycles, so each collection re-scans them for nothing: a
    quarter of the build's time on the shared traces. Whatever cycle is left is collected
    once the collector runs again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _build_site(site: str, chunks: Iterable[list[dict]], traj_steps: dict[str, list[tuple[int, str]]],
                config: BuildConfig | None, write_lines: Callable[[pa.Table], None] | None) -> InteractionElementGraph:
    config = config or BuildConfig()
    settings = config.resolve_settings()
    # The passes that need the parsed trees see them a chunk of whole trajectories at a time, so
    # that a site's trees are never held together (they are most of a build's memory); the rest
    # (steps, nodes, edges, lines) accumulate across chunks. The outputs do not depend on CHUNK.
    memo: dict = {}
    element_acc, contain_acc, parsed = passes.ElementNodes(site), passes.ContainmentEdges(config.containment), \
        ParsedTables(write_lines)
    steps = passes.DemonstratedSteps([])
    rejected: dict = {}
    obs_rejects: list[Reject] = []
    structure: Counter = Counter()
    pages: set[str] = set()
    accepted = n_in = 0
    trajs: set[str] = set()
    for chunk in chunks:
        n_in += len(chunk)
        trajs.update(r["traj_id"] for r in chunk)
        if memo_entries(memo) > MEMO_ENTRIES:
            memo.clear()       # a cache (distinct lines, chain links, ids): the outputs do not depend on it
        obs = passes.parse_and_resolve(site, chunk, memo=memo, **settings)
        steps.extend(passes.demonstrated_steps(site, obs))
        element_acc.see(obs)
        contain_acc.see(obs)
        parsed.add(obs.accepted, memo.get("lines", {}))
        rejected.update(obs.rejected)
        obs_rejects += obs.rejects
        structure.update(o.res.page.context for o in obs.accepted)
        pages.update(o.res.content_page for o in obs.accepted)
        accepted += len(obs.accepted)
        del obs, chunk
        # The cycles of this chunk alone (the collector is off): ``ast.literal_eval`` leaves one per
        # call (its nested functions), parsing each step's action; the youngest generation is cheap.
        gc.collect(0)
    elements, sightings = element_acc.rows(steps)
    node_rows = elements + passes.virtual_nodes(site, steps)
    contain = contain_acc.rows()
    interact, cross_site = passes.interaction_edges(site, steps, rejected, traj_steps)
    mapped = steps.mapped
    stats = {
        "element_nodes": len(elements), "virtual_nodes": len(node_rows) - len(elements),
        "containment_edges": len(contain), "interaction_edges": len(interact),
        "trajectories": len(trajs), "observations": accepted,
        "url_paths": len(pages), "elements_seen": sightings["elements_seen"],
        # Observations by structure mode: 'axtree' (indented), 'html' (flat, ancestors from the
        # step's HTML), 'flat' (flat, structure inferred from the text).
        "structure": dict(sorted(structure.items())),
        **{k: v for k, v in sightings.items() if k != "elements_seen"},
        "cross_site_transitions": cross_site,
        "observations_in": n_in, "observations_rejected": dict(Counter(rejected.values())),
        "steps_in": steps.n_in, "steps_out": len(mapped), "steps_rejected": dict(steps.rejected),
    }
    node_rows.sort(key=lambda r: r["node_id"])
    tables = parsed.tables({r["node_id"]: i for i, r in enumerate(node_rows)})
    edges = contain + interact
    edges.sort(key=lambda r: (r["type"], r["src"], r["dst"], r["op"] or ""))
    step_rows = [{"traj_id": t, "step_idx": i, "site": site, "node_id": s.node_id, "kind": s.kind,
                  "op": s.action.op, "page": s.page} for (t, i), s in sorted(mapped.items())]
    # One reject per row at most: in row order ((traj_id, step_idx), as the rows came).
    rejects = sorted(obs_rejects + steps.rejects, key=lambda r: (r.key["traj_id"], r.key["step_idx"]))
    return InteractionElementGraph(site, pinned_table(node_rows, NODE_SCHEMA), pinned_table(edges, EDGE_SCHEMA),
                                   pinned_table(step_rows, STEP_SCHEMA), stats, rejects, tables)


# Observations whose parsed trees a site's build holds at once (at least: a chunk ends where a
# trajectory does). At 10x the paper's pool, 32 rather than 64 took the largest site's peak from
# 121 to 116 MB at the same CPU (what the trees fragment grows with them).
CHUNK = 32
# The site's memo (distinct lines parsed, chain links and ids hashed) is emptied between chunks past
# this many entries: a site's distinct lines grow with its pages, and the memo with them (at 10x the
# paper's pool the largest site's held 39 MB). The shared traces' largest site holds ~8,000; at 10x,
# 10,000 rather than 20,000 took the largest site's peak from 116 to 113 MB at no more CPU.
MEMO_ENTRIES = 10_000


def memo_entries(memo: dict) -> int:
    return sum(sum(map(len, v.values())) if k == "lines" else len(v) for k, v in memo.items())


def trajectory_chunks(rows: list[dict], size: int) -> list[list[dict]]:
    """``rows`` cut, in their order, into runs of at least ``size`` rows (the last may be shorter)
    that never split a trajectory: a cut falls only where every trajectory seen so far has ended."""
    last = {r["traj_id"]: i for i, r in enumerate(rows)}
    chunks, start, end = [], 0, -1
    for i, r in enumerate(rows):
        end = max(end, last[r["traj_id"]])
        if i == end and i + 1 - start >= size:
            chunks.append(rows[start:i + 1])
            start = i + 1
    if start < len(rows) or not chunks:
        chunks.append(rows[start:])
    return chunks


PLAN_COLUMNS = ["traj_id", "step_idx", "site", "success"]
PLAN_BATCH = 8192       # rows of the light columns planning reads at once


def load_plan_columns(run: RunDir) -> Iterator[dict[str, list]]:
    """The four light columns that planning needs (no text), ``PLAN_BATCH`` rows at a time, as
    lists: no row is held as a dict, and the pool's columns are never held whole."""
    with reading(run.trajectories, INGEST), pq.ParquetFile(run.trajectories) as f:
        for batch in f.iter_batches(PLAN_BATCH, columns=PLAN_COLUMNS):
            yield batch.to_pydict()


def plan(batches: Callable[[], Iterable[dict[str, list]]], include_failed: bool,
         source_paths=lambda rows: [None] * len(rows)) -> tuple[dict[str, dict], list[Reject]]:
    """Decide which trajectories each site's build reads (``batches()``: :func:`load_plan_columns`,
    read a second time only when some trajectory failed).

    Returns, per site, ``rows`` (its observations) and ``trajs`` (each of its trajectories -> its
    rows at every site, in the order first seen), and the rejects of planning (``source_paths(indices)``:
    those rows' source paths). What a site's build needs of its trajectories' other rows (the next
    URL, the sites they pass through) it reads itself (:func:`site_plan`): the pool's plan is not held."""
    first: dict[str, tuple[int, bool]] = {}      # a trajectory's first step and its success
    total: Counter = Counter()
    at_site: dict[str, Counter] = defaultdict(Counter)
    for cols in batches():
        for traj, step, site, ok in zip(cols["traj_id"], cols["step_idx"], cols["site"], cols["success"]):
            f = first.get(traj)
            if f is None or step < f[0]:
                first[traj] = (step, ok)
            total[traj] += 1
            at_site[site][traj] += 1
    failed = set() if include_failed else {t for t, (_, ok) in first.items() if not ok}
    per_site: dict[str, dict] = {}
    for site, counts in at_site.items():
        trajs = {t: total[t] for t in counts if t not in failed}
        if trajs:
            per_site[site] = {"rows": sum(counts[t] for t in trajs), "trajs": trajs}
    if not failed:
        return per_site, []
    rows: dict[str, list[tuple[int, int]]] = {t: [] for t in first if t in failed}   # (step, row index)
    n = 0
    for cols in batches():
        for traj, step in zip(cols["traj_id"], cols["step_idx"]):
            if traj in failed:
                rows[traj].append((step, n))
            n += 1
    ordered = [(t, step, i) for t, seq in rows.items() for step, i in sorted(seq)]
    return per_site, [Reject(STAGE, "unsuccessful_trajectory", path or traj,
                             "trajectory did not succeed (use --include-failed to keep it)",
                             {"traj_id": traj, "step_idx": step})
                      for (traj, step, _), path in zip(ordered, source_paths([i for _, _, i in ordered]))]


def site_plan(run: RunDir, site: str, trajs: dict[str, int]) -> tuple[dict, dict, bool]:
    """What one site's build needs of its trajectories (``trajs``: each -> its rows, at every site),
    from their light columns: ``wanted`` ((traj_id, step_idx) of the site's rows -> next_url, the
    URL of the trajectory's next observation, for virtual nodes scoped to the landing page),
    ``traj_steps`` (every (step_idx, site) of each trajectory, so that a transition through another
    site's page is not taken for a direct one), and whether the file holds the site's rows in
    (traj_id, step_idx) order (``data.ingest`` writes them so: the build then streams them)."""
    got: dict[str, list[tuple[int, str, str]]] = {t: [] for t in trajs}
    order: list[tuple[str, int]] = []
    with reading(run.trajectories, INGEST), pq.ParquetFile(run.trajectories) as f:
        mine = site_row_groups(f, site)
        _plan_groups(f, mine, set(trajs), got, site, order)
        elsewhere = {t for t, n in trajs.items() if len(got[t]) < n}    # rows at other sites: their groups
        if elsewhere:
            _plan_groups(f, [g for g in range(f.num_row_groups) if g not in set(mine)], elsewhere, got, site, order)
    wanted, traj_steps = {}, {}
    for traj, seq in got.items():
        seq.sort()
        steps = [{"step_idx": i, "url": u} for i, _, u in seq]
        traj_steps[traj] = [(i, s) for i, s, _ in seq]
        for (i, s, _), nxt in zip(seq, next_urls(steps)):
            if s == site:
                wanted[(traj, i)] = nxt
    return wanted, traj_steps, order == sorted(order)


def _plan_groups(f: pq.ParquetFile, groups: list[int], trajs: set[str], got: dict, site: str,
                 order: list | None) -> None:
    for g in groups:
        if not trajs:
            return
        t = f.read_row_group(g, columns=["traj_id", "step_idx", "site", "url"]).to_pydict()
        for traj, step, s, url in zip(t["traj_id"], t["step_idx"], t["site"], t["url"]):
            if traj in trajs:
                got[traj].append((step, s, url))
                if order is not None and s == site:
                    order.append((traj, step))


def read_site_chunks(run: RunDir, site: str, wanted: dict, in_order: bool, size: int) -> Iterator[list[dict]]:
    """The site's observations that its plan selected (``wanted``: :func:`site_plan`), with
    ``next_url`` attached, in (traj_id, step_idx) order, as chunks of at least ``size`` rows that
    never split a trajectory (:func:`trajectory_chunks`). A file in that order (``in_order``: as
    ``data.ingest`` writes it) is read a row group at a time, so a site's rows are never held
    together; another is read whole and sorted. HTML is read only for flat observations, the only
    ones whose ancestors come from it. Observation text never travels between processes (or Dask
    workers): each site's build reads its own."""
    if not in_order:
        rows = [r for g in _wanted_rows(run, site, wanted) for r in g]
        rows.sort(key=lambda r: (r["traj_id"], r["step_idx"]))
        yield from trajectory_chunks(rows, size)
        return
    chunk: list[dict] = []
    for group in _wanted_rows(run, site, wanted):
        for r in group:
            if len(chunk) >= size and r["traj_id"] != chunk[-1]["traj_id"]:
                yield chunk
                chunk = []
            chunk.append(r)
    yield chunk


def _wanted_rows(run: RunDir, site: str, wanted: dict) -> Iterator[list[dict]]:
    """The wanted rows of each row group that may hold ``site``, in the file's order."""
    columns = [c for c in COLUMNS if c != "html"] + ["source_path"]
    with reading(run.trajectories, INGEST), pq.ParquetFile(run.trajectories) as f:
        has_html = "html" in f.schema_arrow.names
        for g in site_row_groups(f, site):
            ids = f.read_row_group(g, columns=["traj_id", "step_idx", "site"]).to_pydict()
            keep = [i for i, key in enumerate(zip(ids["traj_id"], ids["step_idx"]))
                    if ids["site"][i] == site and key in wanted]
            if not keep:
                continue
            rows = group_rows(f, g, columns, keep, has_html)
            for r in rows:
                r["next_url"] = wanted[(r["traj_id"], r["step_idx"])]
            yield rows


def group_rows(f: pq.ParquetFile, g: int, columns: list[str], keep: list[int], has_html: bool) -> list[dict]:
    """Rows ``keep`` of row group ``g`` as dicts of ``columns``, with ``html`` read only for flat
    observations (the only ones whose ancestors come from it; None for the others)."""
    rows = f.read_row_group(g, columns=columns).take(int32_array(keep)).to_pylist()
    flat = [i for i, r in zip(keep, rows) if r["obs_format"] == "flat"]
    html = dict(zip(flat, f.read_row_group(g, columns=["html"]).take(int32_array(flat)).column("html").to_pylist())) \
        if has_html and flat else {}
    for i, r in zip(keep, rows):
        r["html"] = html.get(i)
    return rows


def site_row_groups(f: pq.ParquetFile, site: str) -> list[int]:
    """The row groups of a trajectories file that may hold ``site``'s rows, by the ``site``
    column's statistics (``data.ingest`` clusters rows by site; a group without statistics is
    read). Reading them through ``pyarrow.parquet.ParquetFile`` rather than ``read_table``'s
    filters keeps ``pyarrow.dataset`` (and the pandas it imports, ~0.4 s) out of the build."""
    meta = f.metadata
    if not meta.num_row_groups:
        return []
    # The column by its row group's paths: ``meta.schema`` makes a reference cycle with the file's
    # metadata, which then outlives the file until the cycle collector runs (which a site's build
    # turns off): 7 MB for the 371 row groups at 10x the paper's pool, per reading.
    first = meta.row_group(0)
    col = [first.column(j).path_in_schema for j in range(meta.num_columns)].index("site")
    out = []
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(col).statistics
        if st is None or not st.has_min_max or st.min <= site <= st.max:
            out.append(i)
    return out


def write_site(run: RunDir, graph: InteractionElementGraph) -> Path:
    out = run.graph_dir(graph.site)
    atomic_write_parquet(out / "nodes.parquet", graph.nodes)
    atomic_write_parquet(out / "edges.parquet", graph.edges)
    atomic_write_parquet(out / "steps.parquet", graph.steps)
    if graph.parsed is not None:
        # in row groups: written whole, a 10x site's 92k lines took 32 MB more to encode, 13 MB so
        if graph.parsed[0] is not None:
            atomic_write_parquet(out / LINES_FILE, graph.parsed[0], LINES_ROW_GROUP)
        atomic_write_parquet(out / OBS_FILE, graph.parsed[1], OBS_ROW_GROUP)
    return out


def build_and_write_site(run_root: str, site: str, plan_entry: dict,
                         config: BuildConfig | None = None) -> tuple[str, dict, list[Reject]]:
    """Read, build and write one site's graph; returns (site, stats, rejects)."""
    run = RunDir(run_root)
    arrow_allocator()     # in a fresh worker and a Dask worker too
    wanted, traj_steps, in_order = site_plan(run, site, plan_entry["trajs"])
    # The parsed lines go to their file as they fill (a site's grow with its pages); it replaces
    # the last one once the site's other files are written.
    with atomic_parquet_writer(run.graph_dir(site) / LINES_FILE, LINE_SCHEMA) as lines:
        graph = build_site_chunks(site, read_site_chunks(run, site, wanted, in_order, CHUNK), traj_steps, config,
                                  lambda table: lines.write_table(table, row_group_size=LINES_ROW_GROUP))
        write_site(run, graph)
    stats, rejects = graph.stats, graph.rejects
    del graph
    release_memory()       # a worker builds site after site: what this one freed goes back now
    return site, stats, rejects


# What a fresh worker imports before its site (this module's own imports; not this module, which a
# worker started from ``python -m graph.build`` runs again as its ``__main__``: it must not be there).
PRELOAD = ["cli.config", "data.rundir", "graph.passes", "graph.parsed", "graph.schema", "pyarrow.parquet"]


# A fresh process builds sites until it has read this many observations: small sites share one (a
# process costs ~20 ms to start and warm its heap: at the paper's scale, 50 sites of 120-290, +10%
# CPU), a large one has a process to itself (what a site's build leaves fragmented stays with it).
ROWS_PER_PROCESS = 1000


def process_tasks(jobs: list[tuple], rows: int) -> list[list[tuple]]:
    """The site jobs, in order, cut into runs of at least ``rows`` observations (the last may be less)."""
    tasks: list[list[tuple]] = [[]]
    n = 0
    for job in jobs:
        if n >= rows:
            tasks.append([])
            n = 0
        tasks[-1].append(job)
        n += job[2]["rows"]
    return tasks if tasks[0] else []


def _job(args) -> tuple[str, dict, list[Reject]]:
    return build_and_write_site(*args)


def _jobs(jobs: list[tuple]) -> list[tuple[str, dict, list[Reject]]]:
    return [_job(j) for j in jobs]


def finalize(run: RunDir, results: list[tuple[str, dict, Iterable[Reject]]], plan_rejects: list[Reject],
             n_rows: int, include_failed: bool, config: BuildConfig | None = None) -> StageStats:
    """Write the manifest and the stage's stats and rejects from the per-site results (a site's
    rejects: a list, or a ``RejectSpool``'s reader, read once as they are written)."""
    config = config or BuildConfig(include_failed=include_failed)
    stats = StageStats(STAGE, n_in=n_rows)
    for r in plan_rejects:
        stats.rejected[r.reason] += 1
    step_in = step_out = 0
    step_rej = Counter()
    sites = {}
    site_rejects = []
    for site, s, rej in sorted(results, key=lambda r: r[0]):
        sites[site] = {**s, "dir": str(run.graph_dir(site).relative_to(run.root))}
        stats.n_out += s["observations"]
        stats.rejected.update(s["observations_rejected"])
        step_in += s["steps_in"]
        step_out += s["steps_out"]
        step_rej.update(s["steps_rejected"])
        site_rejects.append(rej)
    rejects = itertools.chain(plan_rejects, *site_rejects)      # written as read (write_stage streams them)
    totals = {k: sum(s[k] for s in sites.values()) for k in
              ("element_nodes", "virtual_nodes", "containment_edges", "interaction_edges", "trajectories",
               "observations", "url_paths", "elements_seen", "positional_elements", "ambiguous_elements",
               "cross_site_transitions")}
    structure = Counter()
    for s in sites.values():
        structure.update(s["structure"])
    totals["structure"] = dict(sorted(structure.items()))
    n_seen = totals["elements_seen"]
    totals["positional_rate"] = round(totals["positional_elements"] / n_seen, 6) if n_seen else 0.0
    totals["ambiguity_rate"] = round(totals["ambiguous_elements"] / n_seen, 6) if n_seen else 0.0
    # Folders of sites that this build did not produce (an earlier build's) would be loaded as
    # if current: remove them.
    graphs_dir = run.graphs
    keep = {run.graph_dir(s).name for s in sites}
    for d in graphs_dir.iterdir() if graphs_dir.exists() else ():
        if d.is_dir() and d.name not in keep and (d / "nodes.parquet").exists():
            shutil.rmtree(d)
    manifest = {"stage": STAGE, "identity": config.identity, "containment": config.containment,
                "include_failed": include_failed,
                "max_depth": config.max_depth, "max_nodes": config.max_nodes, "sites": sites, "totals": totals}
    atomic_write_text(run.graph_manifest, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    stats.extra = {"config": {k: v for k, v in asdict(config).items() if k != "workers"}, "sites": len(sites), **totals,
                   "steps": {"in": step_in, "out": step_out, "rejected": dict(sorted(step_rej.items()))}}
    assert step_in == step_out + sum(step_rej.values())
    run.write_stage(stats, rejects)
    return stats


def prepare(run_dir: str | Path, include_failed: bool = False) -> tuple[RunDir, int, dict[str, dict], list[Reject]]:
    """Everything before the per-site builds, as the CLI and the ``build-graphs`` flow both do it:
    the checks (FileNotFoundError, as every stage's one-line error), then the plan. Returns the run
    directory (which remembers the input fingerprints for ``finalize``), the number of rows, the
    per-site plans and the planning rejects."""
    run = RunDir(run_dir)
    if not run.trajectories.exists():
        raise FileNotFoundError(f"{run.trajectories} not found: run `python -m data.ingest` first")
    arrow_allocator()
    # Before the work: the trajectories open and have the columns, the run directory is
    # writable, and the trajectories are this run's (recorded in stats.json).
    require_columns(run.trajectories, COLUMNS + ["source_path"], INGEST)
    run.check_inputs(STAGE, run.trajectories)
    with pq.ParquetFile(run.trajectories) as f:
        n_rows = f.metadata.num_rows
    per_site, plan_rejects = plan(lambda: load_plan_columns(run), include_failed, lambda rows: source_paths(run, rows))
    release_memory()       # the workers fork from here
    check_outputs(run, files=(str(run.graph_manifest.relative_to(run.root)),),
                  dirs=(str(run.graphs.relative_to(run.root)),
                        *(str(run.graph_dir(s).relative_to(run.root)) for s in per_site)))
    return run, n_rows, per_site, plan_rejects


def source_paths(run: RunDir, rows: list[int]) -> list[str | None]:
    """The ``source_path`` of the rows at these indices (read only when planning rejects some)."""
    if not rows:
        return []
    with reading(run.trajectories, INGEST), pq.ParquetFile(run.trajectories) as f:
        return f.read(columns=["source_path"]).column("source_path").take(rows).to_pylist()


def build_graphs(run_dir: str | Path, include_failed: bool = False, workers: int | None = None,
                 config: BuildConfig | None = None) -> StageStats:
    """Build every site's graph of a run (sites in parallel processes when ``workers`` > 1).
    ``config`` (a :class:`BuildConfig`) overrides ``include_failed`` and ``workers``."""
    config = config or BuildConfig(include_failed=include_failed, workers=workers)
    include_failed, workers = config.include_failed, config.workers or os.cpu_count() or 1
    arrow_allocator()      # first: the fresh processes take Arrow's allocator from the environment
    # Sites in fresh processes (data.memory.fresh_processes), whose server imports while this plans;
    # their rejects wait on disk, not in this process (RejectSpool).
    with RejectSpool() as spool:
        with fresh_processes(PRELOAD) if workers > 1 else contextlib.nullcontext() as imap:
            run, n_rows, per_site, plan_rejects = prepare(run_dir, include_failed)
            # Largest sites first, so the pool does not end waiting on one big site.
            jobs = [(str(run.root), site, sp, config)
                    for site, sp in sorted(per_site.items(), key=lambda kv: -kv[1]["rows"])]
            workers = min(workers, len(jobs))
            done = (r for part in imap(_jobs, process_tasks(jobs, ROWS_PER_PROCESS), workers) for r in part) \
                if workers > 1 else map(_job, jobs)
            results = []
            for site, stats, rejects in done:
                spool.add(site, rejects)
                results.append((site, stats, spool.read(site)))
        return finalize(run, results, plan_rejects, n_rows, include_failed, config)


# A few words after a loss reason (data.loss): what the user can do about the common ones.
LOSS_WHY = {"unsuccessful_trajectory": "graphs learn from successful trajectories; --include-failed keeps them",
            "action_failed": "the recorded action raised an error in the browser"}


def build_parser(prog: str = "python -m graph.build", doc: str = __doc__):
    """``--run`` (the one flag written by hand) and ``BuildConfig``'s flags."""
    ap = make_parser(prog, doc)
    ap.add_argument("--run", required=True, help="run directory holding trajectories.parquet")
    BuildConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = BuildConfig.from_args(args)
        stats = build_graphs(args.run, config=config)
    except FileNotFoundError as e:
        return error_exit(e)
    print(stats.summary())
    if (line := stage_loss_line(stats, "steps", why=LOSS_WHY)):
        print(line)
    t = stats.extra
    print(f"{t['sites']} site graphs ({config.identity} identity): {t['element_nodes']} element nodes, "
          f"{t['virtual_nodes']} virtual nodes, {t['containment_edges']} containment edges, "
          f"{t['interaction_edges']} interaction edges; ambiguity rate {t['ambiguity_rate']:.4%}")
    print(f"wrote {RunDir(args.run).graph_manifest}")
    return 0 if stats.n_out else 1


if __name__ == "__main__":
    sys.exit(main())
