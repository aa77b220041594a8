"""The teacher's stage against the scripted endpoint, split into its start, its requests and its end.

    .venv/bin/python bench/teacher_stage.py --kept runs/h42y/x1 [--code DIR ...] [--repeat N]

``--kept``: a run that ``bench/paper_scale.py --keep`` left (its ``run/`` and ``labels.json``).
Its run directory is copied once (without the teacher's outputs; each run replaces the last one's),
then the bench's scripted OpenAI-protocol server starts (``paper_scale.Endpoint``: 200 ms a
request, the verdicts of ``labels.json``) and ``python -m teacher.verify`` of each checkout in
``--code`` (default: this one) runs in turn, ``--repeat`` times, interleaved, each with an empty
response cache. Prints per run: wall and CPU seconds, from the process's start to the first
judgment request, the requests' span, from the last answer to the process's end, the endpoint
bound (calls x latency / concurrency) and its share of the wall time and of the span (issue 42:
at least 90% of the wall).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.paper_scale import Endpoint  # noqa: E402
from cli.config import make_parser  # noqa: E402

OUTPUTS = ("preferences.parquet", "discarded.parquet", "export", "report", "README.md", "audit")


def run_once(code: Path, run: Path, ep: Endpoint, cache: Path, concurrency: int, latency: float) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    cmd = [sys.executable, "-m", "teacher.verify", "--run", str(run), "--k", "5", "--quiet", "--base-url", ep.url,
           "--model", "scripted-teacher", "--concurrency", str(concurrency), "--cache-dir", str(cache)]
    calls0 = ep.calls()[1]
    ep.times[0] = ep.times[1] = 0.0        # the server's first and last judgment, this run's
    t0, c0 = time.time(), os.times()
    proc = subprocess.run(cmd, cwd=code, capture_output=True, text=True)
    t1, c1 = time.time(), os.times()
    if proc.returncode:
        raise SystemExit(f"teacher.verify failed ({code}): {proc.stderr[-2000:]}")
    calls = ep.calls()[1] - calls0
    if not calls:
        raise SystemExit(f"teacher.verify made no judgment request ({code}): is the response cache empty?")
    floor = calls * latency / concurrency
    wall, span = t1 - t0, ep.times[1] - ep.times[0]
    return {"wall": wall, "cpu": c1.children_user + c1.children_system - c0.children_user - c0.children_system,
            "start": ep.times[0] - t0, "span": span, "end": t1 - ep.times[1], "calls": calls, "floor": floor,
            "share": floor / wall, "span_share": floor / span}


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("bench/teacher_stage.py", __doc__)
    ap.add_argument("--kept", type=Path, required=True, help="a run kept by bench/paper_scale.py --keep")
    ap.add_argument("--code", type=Path, nargs="+", default=[ROOT], help="checkouts to run, interleaved")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds a request (paper_scale's default)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="teacher-stage-") as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(args.kept / "run", run, ignore=shutil.ignore_patterns(*OUTPUTS))
        with Endpoint(args.latency, args.kept / "labels.json") as ep:
            for _ in range(args.repeat):
                for code in args.code:
                    r = run_once(code.resolve(), run, ep, Path(tmp) / "cache", args.concurrency, args.latency)
                    print(f"{code}: wall {r['wall']:.1f} s, CPU {r['cpu']:.1f} s; start -> first request "
                          f"{r['start']:.2f} s, requests {r['span']:.1f} s, last answer -> end {r['end']:.2f} s; "
                          f"{r['calls']:,} calls, bound {r['floor']:.1f} s = {r['share']:.1%} of the wall "
                          f"({r['span_share']:.1%} of the requests' span)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
