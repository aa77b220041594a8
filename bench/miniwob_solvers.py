"""The scripted MiniWoB++ solvers' success rates by the tasks' own validators (issues 27, 37).

    .venv/bin/python bench/miniwob_solvers.py [--seeds 0-19] [--workers 1] [--out runs/bench-miniwob-solvers]
    .venv/bin/python bench/miniwob_solvers.py --tasks rich --seeds 100-119 --max-steps 25 --out runs/bench-rich

Runs ``python -m search.miniwob --prm none --policy solver --tasks TASKS --seeds SEEDS --max-steps N``
(with ``--resume``: a rerun reuses finished episodes) and prints, per task, the episodes the
validator gave reward 1, the rate with its Wilson 95% interval, the mean steps, and whether the
solver counts (rate >= ``--counts``: 90% for axtree10, issue 27; 95% for rich, issue 37), as a
Markdown table for ``bench/RESULTS.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from cli.config import Configurable, make_parser  # noqa: E402
from dataset.stats import wilson  # noqa: E402

COUNTS = {"axtree10": 0.9, "rich": 0.95}       # a solver counts at this success rate or above
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "PREFECT_HOME": str(ROOT / ".cache" / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
       "DO_NOT_TRACK": "1"}


@dataclass
class SolverBench(Configurable):
    ARG_GROUP = "bench"

    seeds: str = field(default="0-19", metadata={"help": "episode seeds per task"})
    tasks: str = field(default="axtree10", metadata={"help": "a subset (axtree10, rich) or task names, spaced"})
    max_steps: int = field(default=10, metadata={"min": 1, "help": "steps per episode at most"})
    counts: float | None = field(default=None, metadata={
        "help": "the rate a solver counts at (default: 0.95 for rich, else 0.9)"})
    workers: int = field(default=1, metadata={"min": 1, "help": "episodes in parallel (search.miniwob --workers)"})
    out: str = field(default="runs/bench-miniwob-solvers", metadata={"help": "the run folder"})


def table(out: Path, counts: float) -> list[str]:
    """The per-task table of a finished run's summary and step lines."""
    summary = json.loads((out / "summary.json").read_text())
    lines = [f"| task | reward 1 | rate | Wilson 95% | mean steps | counts (>= {counts:.0%}) |",
             "|---|---|---|---|---|---|"]
    for site, s in summary["per_task"].items():
        task = site.removeprefix("miniwob.")
        steps = [json.loads(f.read_text().splitlines()[-1])["n_steps"] for f in (out / "tasks").glob(f"{task}.*.jsonl")]
        lo, hi = wilson(s["success"], s["tasks"])
        lines.append(f"| {task} | {s['success']}/{s['tasks']} | {s['success_rate']:.2f} | [{lo:.2f}, {hi:.2f}] | "
                     f"{sum(steps) / len(steps):.1f} | {'yes' if s['success_rate'] >= counts else 'no'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("bench/miniwob_solvers.py", __doc__)
    SolverBench.add_args(ap)
    a = SolverBench.from_args(ap.parse_args(argv))
    clock = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "search.miniwob", "--prm", "none", "--policy", "solver", "--tasks",
                        *a.tasks.split(), "--seeds", a.seeds, "--max-steps", str(a.max_steps),
                        "--workers", str(a.workers), "--out", a.out, "--resume"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"search.miniwob failed ({p.returncode}):\n{p.stderr[-3000:]}")
    print("\n".join(table(ROOT / a.out, a.counts if a.counts is not None else COUNTS.get(a.tasks, 0.9))))
    print(f"\nseeds {a.seeds}, --workers {a.workers}: {time.perf_counter() - clock:.0f} s wall clock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
