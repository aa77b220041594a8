"""The scripted MiniWoB++ solvers' success rates by the tasks' own validators (issues 27, 37).

    .venv/bin/python bench/miniwob_solvers.py [--seeds 0-19] [--workers 1] [--out runs/bench-miniwob-solvers]
    .venv/bin/python bench/miniwob_solvers.py --tasks rich --seeds 100-119 --max-steps 25 --out runs/bench-rich
    .venv/bin/python bench/miniwob_solvers.py --direct --tasks "multi-orderings email-inbox" --max-steps 25 [--lean]

Runs ``python -m search.miniwob --prm none --policy solver --tasks TASKS --seeds SEEDS --max-steps N``
(with ``--resume``: a rerun reuses finished episodes) and prints, per task, the episodes the
validator gave reward 1, the rate with its Wilson 95% interval, the mean steps, and whether the
solver counts (rate >= ``--counts``: 90% for axtree10, issue 27; 95% for rich, issue 37), as a
Markdown table for ``bench/RESULTS.md``. ``--direct`` runs the solvers in the browser without
``search.miniwob`` (see ``direct_rows``); ``--lean`` there in ``harness.lean``'s browser, the replay's.
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
# the repository, not bench/, first: bench/miniwob.py would shadow the miniwob wheel (--direct)
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or '.').resolve() != ROOT / 'bench']

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
    direct: bool = field(default=False, metadata={
        "help": "run the solvers in harness.miniwob's browser directly, without search.miniwob (one worker, no run "
                "folder)"})
    lean: bool = field(default=False, metadata={
        "help": "with --direct: in harness.lean's browser (resets on one kept page, AXTree-only observations), "
                "as teacher.replay runs the solvers"})


def run_rows(out: Path) -> list[tuple[str, int, int, float]]:
    """(task, episodes with reward 1, episodes, mean steps) of a finished search.miniwob run."""
    summary = json.loads((out / "summary.json").read_text())
    rows = []
    for site, s in summary["per_task"].items():
        task = site.removeprefix("miniwob.")
        steps = [json.loads(f.read_text().splitlines()[-1])["n_steps"] for f in (out / "tasks").glob(f"{task}.*.jsonl")]
        rows.append((task, s["success"], s["tasks"], sum(steps) / len(steps)))
    return rows


def direct_rows(tasks: list[str], seeds: str, max_steps: int, lean: bool = False) -> list[tuple[str, int, int, float]]:
    """The same rows with the solvers acting in ``harness.miniwob``'s browser directly (``lean``:
    ``harness.lean``'s, as ``teacher.replay`` runs them), without search.miniwob."""
    from harness.miniwob import miniwob_harness, parse_seeds, select_tasks, task_classes
    from harness.solvers import solve_step

    rows = []
    for task in select_tasks(tasks, task_classes()):
        wins, steps = 0, []
        with miniwob_harness(task, lean=lean) as h:
            for seed in parse_seeds(seeds):
                obs, n = h.reset(seed=seed), 0
                while not h.task_done and n < max_steps and (action := solve_step(task, obs.goal, obs.axtree)):
                    obs, n = h.step(action), n + 1
                wins, steps = wins + (h.reward == 1.0), steps + [n]
        rows.append((task, wins, len(steps), sum(steps) / len(steps)))
    return rows


def table(rows: list[tuple[str, int, int, float]], counts: float) -> list[str]:
    """The Markdown table of ``rows`` (``run_rows``, ``direct_rows``)."""
    lines = [f"| task | reward 1 | rate | Wilson 95% | mean steps | counts (>= {counts:.0%}) |",
             "|---|---|---|---|---|---|"]
    for task, won, n, steps in rows:
        (lo, hi), rate = wilson(won, n), won / n
        lines.append(f"| {task} | {won}/{n} | {rate:.2f} | [{lo:.2f}, {hi:.2f}] | {steps:.1f} | "
                     f"{'yes' if rate >= counts else 'no'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("bench/miniwob_solvers.py", __doc__)
    SolverBench.add_args(ap)
    a = SolverBench.from_args(ap.parse_args(argv))
    clock = time.perf_counter()
    if a.direct:
        rows = direct_rows(a.tasks.split(), a.seeds, a.max_steps, a.lean)
    else:
        p = subprocess.run([sys.executable, "-m", "search.miniwob", "--prm", "none", "--policy", "solver", "--tasks",
                            *a.tasks.split(), "--seeds", a.seeds, "--max-steps", str(a.max_steps),
                            "--workers", str(a.workers), "--out", a.out, "--resume"],
                           cwd=ROOT, env=ENV, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"search.miniwob failed ({p.returncode}):\n{p.stderr[-3000:]}")
        rows = run_rows(ROOT / a.out)
    print("\n".join(table(rows, a.counts if a.counts is not None else COUNTS.get(a.tasks, 0.9))))
    print(f"\nseeds {a.seeds}, --workers {a.workers}: {time.perf_counter() - clock:.0f} s wall clock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
