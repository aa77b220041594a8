"""What one site's graph build holds in memory, by source line (tracemalloc).

    .venv/bin/python bench/site_memory.py RUN [RUN ...] [--site SITE] [--top 8]

For each run directory (ingested, e.g. ``bench/paper_scale.py --keep``'s ``xS/run``): the plan of
``graph.build``, the site with the most observations (or ``--site``) and its plan, then
``graph.build.build_site_chunks`` (reading the site's rows a row group at a time) under
tracemalloc, with a snapshot when the chunk loop ends (the accumulators at their fullest, just
before the virtual nodes). Prints the build's traced peak and the snapshot's largest files and
lines. Memory only: the tracing makes the build several times slower.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))         # this checkout's code, not the installed one

from cli.config import make_parser  # noqa: E402


def site_memory(run_dir: Path, site: str | None, top: int) -> None:
    from data.rundir import RunDir
    from graph import build, passes

    run = RunDir(run_dir)
    _, _, per_site, _ = build.prepare(run.root)
    site = site or max(per_site, key=lambda s: per_site[s]["rows"])
    wanted, traj_steps, in_order = build.site_plan(run, site, per_site[site]["trajs"])
    snapshot = {}
    virtual_nodes = passes.virtual_nodes

    def at_loop_end(*args, **kwargs):
        snapshot["at"] = tracemalloc.take_snapshot()
        return virtual_nodes(*args, **kwargs)

    passes.virtual_nodes = at_loop_end
    tracemalloc.start(3)
    try:
        build.build_site_chunks(site, build.read_site_chunks(run, site, wanted, in_order, build.CHUNK), traj_steps,
                                build.BuildConfig())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        passes.virtual_nodes = virtual_nodes
    print(f"{run_dir}: site {site}, {len(wanted):,} observations; the build's traced peak {peak / 2**20:.0f} MB "
          f"(its rows read a row group at a time included)")
    for key in ("filename", "lineno"):
        for s in snapshot["at"].statistics(key)[:top]:
            frame = s.traceback[0]
            where = frame.filename.replace(str(ROOT) + "/", "") + (f":{frame.lineno}" if key == "lineno" else "")
            print(f"  {s.size / 2**20:7.1f} MB  {where}")


def main() -> None:
    ap = make_parser("bench/site_memory.py", __doc__)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (ingested)")
    ap.add_argument("--site", help="the site to build (default: the one with the most observations)")
    ap.add_argument("--top", type=int, default=8, help="files and lines to print")
    args = ap.parse_args()
    for run in args.runs:
        site_memory(run, args.site, args.top)


if __name__ == "__main__":
    main()
