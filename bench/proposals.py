"""Benchmark proposals.mine on the replicated corpus of the graph benchmark.

    .venv/bin/python bench/proposals.py [--shared ../shared/data] [--scale 32] [--workers N]

Ingests the shared AgentLab traces, replicates the successful trajectories ``--scale`` times
(>= 10,000 observations at 32x, as in bench/graphs.py), builds the graphs, warms the LLM cache
with one mining run (fill values completed by the embedded model), then times a second run in a
fresh process: the full pool with every fill completion cached. Prints candidates/s and peak RSS.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from graphs import measure, replicate  # noqa: E402

from data.ingest import ingest  # noqa: E402
from graph.build import build_graphs  # noqa: E402

_MINE = """
t = time.perf_counter()
from proposals.mine import MineConfig, mine
from teacher.llm import LLMConfig
stats = mine(sys.argv[1], MineConfig(budget=10000, seed=42), LLMConfig(cache_dir=sys.argv[2]),
             workers=int(sys.argv[3]) or None)
dt = time.perf_counter() - t
time.sleep(0.05)
print(json.dumps({"seconds": dt, "candidates": stats.n_out, "proposed": stats.n_in, "peak_rss_mb": peak[0] / 2**20,
                  "llm": stats.extra["llm"], "gmcp": stats.extra["audit"]["sample"]["gmcp_ratio"]}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--scale", type=int, default=32)
    ap.add_argument("--workers", type=int, default=0, help="0: one per core")
    args = ap.parse_args(argv)
    if not (args.shared / "agentlab_workarena").is_dir():
        print(f"skip: shared traces not found at {args.shared}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base, run, cache = Path(tmp) / "base", Path(tmp) / "run", Path(tmp) / "llm-cache"
        ingest("agentlab", [args.shared / "agentlab_workarena"], base)
        n = replicate(base / "trajectories.parquet", run, args.scale)
        build_graphs(run)
        t = time.perf_counter()
        warm = measure(_MINE, run, cache, args.workers)
        print(f"warm-up (fills through the embedded model): {time.perf_counter() - t:.1f} s, "
              f"{warm['llm'].get('calls', 0)} fill calls, {warm['llm'].get('cached', 0)} cached")
        r = measure(_MINE, run, cache, args.workers)
        print(f"{n} observations, {r['proposed']} proposals, {r['candidates']} candidates in {r['seconds']:.2f} s "
              f"(process start and imports included)")
        print(f"candidates/s: {r['candidates'] / r['seconds']:.0f} (goal >= 2000); "
              f"proposals/s: {r['proposed'] / r['seconds']:.0f}; peak RSS {r['peak_rss_mb']:.0f} MB; "
              f"fill calls {r['llm'].get('calls', 0)}, all cached: {r['llm'].get('cached') == r['llm'].get('calls')}; "
              f"sample GMCP {r['gmcp']:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
