"""Benchmark graph.build at the paper's scale.

    .venv/bin/python bench/graphs.py [--shared ../shared/data] [--scales 1 4 32] [--workers N]

Ingests the shared AgentLab traces once, keeps the successful trajectories, replicates them with
distinct task ids, trajectory ids and site names (so the graphs grow with the data, as 50 real
sites would) up to the largest scale, then runs ``python -m graph.build`` on each scale in a
fresh process. Prints observations/s (build call and whole command) and peak RSS (the command
and its worker processes), and the time ratio 4x / 1x (linear = 4.0).
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


def measure(body: str, *args) -> dict:
    """Run ``body`` in a fresh process under the peak-RSS sampler; its JSON line plus wall time."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _SAMPLER + body, *map(str, args)], cwd=ROOT,
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
    args = ap.parse_args(argv)
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
