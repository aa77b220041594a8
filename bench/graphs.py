"""Benchmark graph.build at the paper's scale.

    .venv/bin/python bench/graphs.py [--shared ../shared/data] [--scales 1 4 32] [--workers N]
    .venv/bin/python bench/graphs.py --nesting 1000 3000 6000 12000 [--code DIR]

Ingests the shared AgentLab traces once, keeps the successful trajectories, replicates them with
distinct task ids, trajectory ids and site names (so the graphs grow with the data, as 50 real
sites would) up to the largest scale, then runs ``python -m graph.build`` on each scale in a
fresh process. Prints observations/s (build call and whole command) and peak RSS (the command
and its worker processes), and the time ratio 4x / 1x (linear = 4.0).

``--nesting N...`` (issue 24 item 4) builds, for each N, a run of one observation: a flat AXTree of
N nested named regions, each holding a button (the hostile probe's shape), with both identities,
with the depth guard lifted (``--max-depth 0``: the build itself is measured) and with the
default guard (the observation rejected as ``too_deep``). ``--code DIR`` runs another checkout's
``graph.build`` (e.g. ``git archive HEAD~1``) for a before/after figure; its guard flags are
ignored when it has none.
"""

from __future__ import annotations

import json
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

from data.config import make_parser  # noqa: E402
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


def measure(body: str, *args, cwd: Path = ROOT) -> dict:
    """Run ``body`` in a fresh process under the peak-RSS sampler; its JSON line plus wall time."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _SAMPLER + body, *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, check=True)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["wall"] = time.perf_counter() - t
    return res


def replicate(src: Path, dst: Path, k: int) -> int:
    """Write ``k`` copies of the successful trajectories of ``src`` with distinct ids and sites."""
    table = pq.read_table(src)
    table = table.filter(pc.equal(table["success"], True))
    parts = []
    for i in range(k):
        t = table
        for col in ("task_id", "traj_id", "site"):
            t = t.set_column(t.schema.get_field_index(col), col,
                             pc.binary_join_element_wise(t[col], pa.scalar(f"-r{i}"), ""))
        parts.append(t)
    out = for_storage(pa.concat_tables(parts))
    dst.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(dst / "trajectories.parquet", out, ROW_GROUP_SIZE)   # as data.ingest writes it
    return out.num_rows


def main(argv: list[str] | None = None) -> int:
    ap = make_parser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4, 32])
    ap.add_argument("--workers", type=int, default=0, help="0: one per core")
    ap.add_argument("--nesting", type=int, nargs="+", default=None,
                    help="measure graph.build on N nested regions (issue 24) and stop")
    ap.add_argument("--code", type=Path, default=ROOT, help="--nesting: the checkout whose graph.build runs")
    args = ap.parse_args(argv)
    if args.nesting:
        with tempfile.TemporaryDirectory() as tmp:
            nesting(args.nesting, args.code.resolve(), Path(tmp))
        return 0
    if not (args.shared / "agentlab_workarena").is_dir():
        print(f"skip: shared traces not found at {args.shared}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        ingest("agentlab", [args.shared / "agentlab_workarena"], base)
        results = {}
        print(f"{'scale':>5} {'obs':>7} {'sites':>5} {'nodes':>8} {'build s':>8} {'obs/s':>7} "
              f"{'cmd s':>7} {'obs/s':>7} {'peak RSS MB':>11}")
        for k in args.scales:
            run = Path(tmp) / f"x{k}"
            n = replicate(base / "trajectories.parquet", run, k)
            r = measure(_BUILD, run, args.workers)
            results[k] = r
            print(f"{k:>5} {n:>7} {r['sites']:>5} {r['element_nodes']:>8} {r['seconds']:>8.2f} "
                  f"{n / r['seconds']:>7.0f} {r['wall']:>7.2f} {n / r['wall']:>7.0f} {r['peak_rss_mb']:>11.0f}")
        if 1 in results and 4 in results:
            print(f"time ratio 4x/1x: {results[4]['seconds'] / results[1]['seconds']:.2f} (linear = 4.00, goal <= 4.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
