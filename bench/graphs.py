"""Benchmark graph.build at the paper's scale.

    .venv/bin/python bench/graphs.py [--shared ../shared/data] [--scales 1 4 32] [--workers N]
                                     [--sites N] [--code DIR ...] [--repeat N]
    .venv/bin/python bench/graphs.py --scales 30 --sites 50 --code /tmp/old . --repeat 3   # paper scale, before/after
    .venv/bin/python bench/graphs.py --nesting 1000 3000 6000 12000 [--code DIR]
    .venv/bin/python bench/graphs.py --containment      (issue 36: E_s / V per --containment mode)

Ingests the shared AgentLab traces once, keeps the successful trajectories, replicates them with
distinct task ids, trajectory ids and site names (so the graphs grow with the data, as 50 real
sites would) up to the largest scale, then runs ``python -m graph.build`` on each scale in a
fresh process. Prints, per build: the ``build_graphs`` call's seconds and observations/s and the
peak RSS (the process and its workers, sampled every 20 ms by a thread beside the build); then the
whole command, ``python -m graph.build --run RUN`` run again alone (process start, imports and
pool start-up included, no sampler): wall seconds, CPU seconds (user + sys, workers included) and
observations/s. Then the time ratio 4x / 1x of the build call (linear = 4.0). ``--sites N`` spreads the
replicated trajectories over N sites instead of one site per copy (the paper's pool: 9,497
observations over 50 sites is ``--scales 30 --sites 50``). ``--code DIR...`` runs each
checkout's ``graph.build`` in turn on the same corpus (e.g. ``git archive d5a60f6`` beside this
one), ``--repeat N`` times, interleaved, for before/after figures taken under the same load.

``--nesting N...`` (issue 24 item 4) builds, for each N, a run of one observation: a flat AXTree of
N nested named regions, each holding a button (the hostile probe's shape), with both identities,
with the depth guard lifted (``--max-depth 0``: the build itself is measured) and with the
default guard (the observation rejected as ``too_deep``). There ``--code DIR`` (the first one)
runs another checkout's ``graph.build``; its guard flags are ignored when it has none.

``--containment`` builds, with ``--containment paper`` and ``ours``, the graphs of the WebPRM
Collection samples (``--source webprm``), of the AgentLab traces flattened into WebPRM rows
(``graph.flatten``) and of the AgentLab traces as recorded (indented), and prints containment edges
over element nodes against the paper's 1,532 / 116,182 = 0.013 (§4.1).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cli.config import make_parser  # noqa: E402
from data.ingest import ingest  # noqa: E402
from data.rundir import atomic_write_parquet  # noqa: E402
from data.schema import ROW_GROUP_SIZE, for_storage  # noqa: E402

# ru_maxrss survives fork+exec (a child starts with its parent's high-water mark), so peak
# memory is sampled instead: the summed RSS of the measured process and its workers, every 20 ms.
# A benchmark body runs after this prelude and prints one JSON line, using ``peak[0]``.
_SAMPLER = """
import json, sys, threading, time
import psutil
peak = [0]
def sample():
    me = psutil.Process()
    while True:
        try:
            peak[0] = max(peak[0], sum(p.memory_info().rss for p in [me] + me.children(recursive=True)))
        except psutil.Error:
            pass
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
"""

_BUILD = """
t = time.perf_counter()
from graph.build import build_graphs
stats = build_graphs(sys.argv[1], workers=int(sys.argv[2]) or None)
dt = time.perf_counter() - t
time.sleep(0.05)
print(json.dumps({"seconds": dt, "out": stats.n_out, "peak_rss_mb": peak[0] / 2**20,
                  "element_nodes": stats.extra["element_nodes"], "sites": stats.extra["sites"]}))
"""


_NESTED = """
import graph.build as gb
t = time.perf_counter()
if hasattr(gb, "BuildConfig"):
    stats = gb.build_graphs(sys.argv[1], config=gb.BuildConfig(workers=1, identity=sys.argv[2],
                                                               max_depth=int(sys.argv[3])))
else:
    stats = gb.build_graphs(sys.argv[1], workers=1)
dt = time.perf_counter() - t
time.sleep(0.05)
print(json.dumps({"seconds": dt, "out": stats.n_out, "rejected": dict(stats.rejected), "peak_rss_mb": peak[0] / 2**20,
                  "element_nodes": stats.extra["element_nodes"]}))
"""


def nested_regions(n: int) -> str:
    lines = ["Tab 0 (current): Deep", "", "[1] RootWebArea 'Deep'"]
    for i in range(n):
        lines.append(f"[r{i}] region 'Region number {i} of the deeply nested page'")
        lines.append(f"[b{i}] button 'Open section {i}'")
    return "\n".join(lines)


def nested_run(dst: Path, n: int) -> int:
    """A run of one trajectory: the nested observation, a click on its deepest button, and the end."""
    from data.schema import StepRecord, steps_to_table

    obs = nested_regions(n)
    steps = [StepRecord(source="webprm", site="deep.example", task_id="t", traj_id="deep", step_idx=i,
                        intent="open it", url="https://deep.example/", observation=obs, obs_format="flat", html=None,
                        action=f"click('b{n - 1}')" if i == 0 else None, action_error=None, thought=None,
                        success=True, source_path=f"deep/step_{i}", meta="{}") for i in range(2)]
    dst.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(dst / "trajectories.parquet", steps_to_table(steps))
    return len(obs)


def nesting(sizes: list[int], code: Path, tmp: Path) -> None:
    print(f"{'nesting':>7} {'MB':>5} {'identity':>8} {'guard':>7} {'out':>3} {'rejected':>16} {'nodes':>6} "
          f"{'build s':>8} {'peak RSS MB':>11}")
    for n in sizes:
        run = tmp / f"nest{n}"
        size = nested_run(run, n)
        for identity in ("paper", "ours"):
            for guard in (0, 1024):
                r = measure(_NESTED, run, identity, guard, cwd=code)
                print(f"{n:>7} {size / 1e6:>5.2f} {identity:>8} {guard or 'off':>7} {r['out']:>3} "
                      f"{json.dumps(r['rejected']):>16} {r['element_nodes']:>6} {r['seconds']:>8.2f} "
                      f"{r['peak_rss_mb']:>11.0f}")


def timed_cli(run: Path, workers: int, cwd: Path) -> dict:
    """``python -m graph.build --run RUN`` of the checkout ``cwd`` as a user runs it (no sampler
    thread beside it): wall seconds and CPU seconds (user + sys, its workers included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    workers_flag = ["--workers", str(workers)] if workers else []
    subprocess.run([sys.executable, "-m", "graph.build", "--run", str(run)] + workers_flag,
                   cwd=cwd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def fresh_run(tmp: Path, corpus: Path) -> Path:
    """A run directory of its own holding ``corpus``'s trajectories (every build starts clean)."""
    run = tmp / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    shutil.copy(corpus / "trajectories.parquet", run)
    return run


def measure(body: str, *args, cwd: Path = ROOT) -> dict:
    """Run ``body`` in a fresh process under the peak-RSS sampler; its JSON line plus wall time."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _SAMPLER + body, *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, check=True)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["wall"] = time.perf_counter() - t
    return res


def replicate(src: Path, dst: Path, k: int, sites: int = 0) -> int:
    """Write ``k`` copies of the successful trajectories of ``src`` with distinct ids and sites
    (one site per copy, or the trajectories dealt round-robin over ``sites`` sites)."""
    table = pq.read_table(src)
    table = table.filter(pc.equal(table["success"], True))
    parts = []
    for i in range(k):
        t = table
        for col in ("task_id", "traj_id", "site"):
            t = t.set_column(t.schema.get_field_index(col), col,
                             pc.binary_join_element_wise(t[col], pa.scalar(f"-r{i}"), ""))
        parts.append(t)
    out = pa.concat_tables(parts)
    if sites:
        order = {t: n for n, t in enumerate(dict.fromkeys(out["traj_id"].to_pylist()))}
        out = out.set_column(out.schema.get_field_index("site"), "site",
                             pa.array([f"site-{order[t] % sites:02d}" for t in out["traj_id"].to_pylist()]))
    out = for_storage(out)
    dst.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(dst / "trajectories.parquet", out, ROW_GROUP_SIZE)   # as data.ingest writes it
    return out.num_rows


PAPER_ES_PER_V = 1532 / 116182      # §4.1: containment edges over element nodes of the WPRM pool


def containment(shared: Path, tmp: Path) -> None:
    """E_s / V with each ``--containment`` mode, on each corpus, beside the paper's."""
    from graph.build import BuildConfig, build_graphs
    from graph.flatten import flatten_run
    from graph.identity import CONTAINMENTS

    ingest("webprm", [shared / "webprm_collection_samples"], tmp / "wprm", quiet=True)
    ingest("agentlab", [shared / "agentlab_workarena", shared / "agentlab_genericagent_miniwob"], tmp / "indented",
           quiet=True)
    flatten_run(tmp / "indented" / "trajectories.parquet", tmp / "rows" / "rows.jsonl")
    ingest("webprm", [tmp / "rows"], tmp / "flat", quiet=True)
    print(f"paper (§4.1): E_s / V = 1532 / 116182 = {PAPER_ES_PER_V:.4f}")
    print(f"{'corpus':<18} {'containment':<11} {'V':>6} {'E_s':>6} {'E_s/V':>7} {'x paper':>8}")
    for corpus in ("wprm", "flat", "indented"):
        for mode in CONTAINMENTS:
            stats = build_graphs(tmp / corpus, config=BuildConfig(containment=mode, workers=1))
            v, es = stats.extra["element_nodes"], stats.extra["containment_edges"]
            print(f"{corpus:<18} {mode:<11} {v:>6} {es:>6} {es / v:>7.4f} {es / v / PAPER_ES_PER_V:>8.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = make_parser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4, 32])
    ap.add_argument("--workers", type=int, default=0, help="0: one per core")
    ap.add_argument("--nesting", type=int, nargs="+", default=None,
                    help="measure graph.build on N nested regions (issue 24) and stop")
    ap.add_argument("--sites", type=int, default=0, help="spread the trajectories over N sites (0: one per copy)")
    ap.add_argument("--code", type=Path, nargs="+", default=[ROOT],
                    help="the checkouts whose graph.build runs, in turn on each corpus (--nesting: the first)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each checkout per scale, interleaved")
    ap.add_argument("--no-rss", action="store_true", help="time the whole command only (no sampled build run)")
    ap.add_argument("--containment", action="store_true", help="E_s / V per --containment mode (issue 36) and stop")
    args = ap.parse_args(argv)
    if args.containment:
        with tempfile.TemporaryDirectory() as tmp:
            containment(args.shared, Path(tmp))
        return 0
    if args.nesting:
        with tempfile.TemporaryDirectory() as tmp:
            nesting(args.nesting, args.code[0].resolve(), Path(tmp))
        return 0
    if not (args.shared / "agentlab_workarena").is_dir():
        print(f"skip: shared traces not found at {args.shared}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        ingest("agentlab", [args.shared / "agentlab_workarena"], base)
        results = {}
        print(f"{'scale':>5} {'obs':>7} {'sites':>5} {'nodes':>8} {'build s':>8} {'obs/s':>7} {'peak RSS MB':>11} "
              f"{'cmd s':>7} {'cmd cpu s':>9} {'cmd obs/s':>9}  code")
        for k in args.scales:
            corpus = Path(tmp) / f"x{k}"
            n = replicate(base / "trajectories.parquet", corpus, k, args.sites)
            for _ in range(args.repeat):
                for code in args.code:
                    # the build call under the peak-RSS sampler, then the command alone
                    if args.no_rss:
                        r = {"sites": "-", "element_nodes": "-", "seconds": float("nan"), "peak_rss_mb": float("nan")}
                    else:
                        r = measure(_BUILD, fresh_run(Path(tmp), corpus), args.workers, cwd=code.resolve())
                        results.setdefault(k, r)
                    cmd = timed_cli(fresh_run(Path(tmp), corpus), args.workers, code.resolve())
                    print(f"{k:>5} {n:>7} {r['sites']:>5} {r['element_nodes']:>8} {r['seconds']:>8.2f} "
                          f"{n / r['seconds']:>7.0f} {r['peak_rss_mb']:>11.0f} {cmd['wall']:>7.2f} {cmd['cpu']:>9.1f} "
                          f"{n / cmd['wall']:>9.0f}  {code}", flush=True)
        if 1 in results and 4 in results:
            print(f"time ratio 4x/1x: {results[4]['seconds'] / results[1]['seconds']:.2f} (linear = 4.00, goal <= 4.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
