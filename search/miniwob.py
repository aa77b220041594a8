"""Knockout best-of-N search with a PRM on MiniWoB++ (BrowserGym), offline, or the unguided baseline.

    python -m search.miniwob --prm embedded --policy embedded --tasks axtree10 --seeds 0-4 --out runs/miniwob/prm
    python -m search.miniwob --prm none --policy gpt-4o --policy-base-url https://api.openai.com/v1 \\
        --tasks click-button miniwob.enter-text --seeds 0-9 --out runs/miniwob/base
    python -m search.miniwob ... --out runs/miniwob/prm --baseline runs/miniwob/base    # adds the difference
    python -m search.miniwob --prm none --policy solver --tasks axtree10 --seeds 0-9 --out runs/miniwob/solver

MiniWoB++'s task pages come with the ``miniwob`` wheel (``miniwob/html/miniwob/``) and run from
files: ``MINIWOB_URL`` (BrowserGym's variable) defaults to that folder, so nothing is served or
downloaded. Each episode is one task drawn with one seed (``--seeds 0-4,7``); its reward is the
task's own (BrowserGym's ``miniwob`` validator: 1 when MiniWoB's raw reward is positive, else 0).
A MiniWoB task ends its episode at the first submit, right or wrong (termination ``task_done``).
``--tasks`` takes MiniWoB names with or without BrowserGym's ``miniwob.`` prefix, or a subset name
(``SUBSETS``: ``axtree10``, ten tasks an AXTree agent can do with clicks, fills and selects; ``all``).

The run is ``search.runner``'s (model flags, run folder, resume, ``--workers``), with the
BrowserGym-action agent and knockout tournament of ``search.webarena``; the policy's prompt holds
the goal and BrowserGym's flattened AXTree as they are. ``--policy solver`` is no model: each step's
one candidate is the task's scripted solver's action (``harness.solvers``), so that the episodes
are demonstrations with the task's own reward. Output in ``--out``:
``tasks/<task>.<seed>.jsonl`` (steps: candidates, bracket, chosen action, feedback, timings; then
the result: reward, termination), ``trajectories.parquet`` (``search.trajectories``; ``meta``
holds ``task`` and ``seed``), ``summary.json`` (``per_task``: success rate per MiniWoB task over its
seeds; ``macro.success_rate``: their mean; ``tasks``: episodes run), ``versions.json``,
``run.json``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace

from data.sites import miniwob_task
from harness.miniwob import (
    PREFIX,
    SUBSETS,
    MiniWoBSetupError,
    base_url,
    check_pages,
    miniwob_harness,
    parse_seeds,
    select_tasks,
    task_classes,
)
from harness.solvers import SOLVERS, solve_step
from search.agent import AXTREE, axtree_policy
from search.runner import (
    RESUME_SETTINGS,
    AXTreeSearch,
    Benchmark,
    SetupError,
    base_row,
    baseline_difference,
    run_summary,
)
from search.runner import build_parser as search_parser
from search.runner import main as run_cli

SOLVER = "solver"       # --policy solver: the scripted solvers as the policy


@dataclass
class MiniWoBSearch(AXTreeSearch):
    """A ``python -m search.miniwob`` run."""

    out: str = field(default="runs/miniwob", metadata={"help": "output folder"})
    task_ids: list[int] | None = field(default=None, metadata={
        "nargs": "*", "help": "not used: --tasks and --seeds name the episodes"})
    max_steps: int = field(default=10, metadata={"min": 1, "help": "steps per episode at most"})
    seed: int = field(default=0, metadata={"help": "not used: --seeds gives each episode its seed"})
    tasks: list[str] | None = field(default=None, metadata={
        "nargs": "*", "help": "MiniWoB tasks (click-button or miniwob.click-button) or a subset "
                              f"({', '.join(SUBSETS)}, all); default axtree10"})
    seeds: str = field(default="0-4", metadata={"help": "episode seeds: 0-4, 0,3,7 or 0-2,9"})
    policy: str = field(metadata={"help": "policy: a folder, 'embedded', a model name at --policy-base-url, or "
                                          f"'{SOLVER}' (harness.solvers' scripted solvers, no model)"})


def tasks(config: MiniWoBSearch) -> list[dict]:
    """One task config per MiniWoB task and seed (``--tasks``, ``--seeds``), its pages checked."""
    if config.demo or config.task_ids:
        raise SetupError("MiniWoB runs its own tasks offline: use --tasks and --seeds (no --demo, --task-ids)")
    try:
        seeds = parse_seeds(config.seeds)
        classes = task_classes()
        names = select_tasks(config.tasks, classes)
        check_pages(base_url(), names)
    except MiniWoBSetupError as e:
        raise SetupError(str(e)) from None
    if config.policy == SOLVER and (unsolved := [n for n in names if n not in SOLVERS]):
        raise SetupError(f"--policy {SOLVER}: no solver for {unsolved}; solvers: {', '.join(SOLVERS)}")
    return [{"task_id": f"{n}.{s}", "task": n, "seed": s, "sites": [PREFIX + n], "intent": classes[n].desc}
            for n in names for s in seeds]


def site_harnesses(config: MiniWoBSearch):
    url = base_url()

    def make(task):
        return miniwob_harness(task["task"], url)
    return make


def solver_propose(obs, history: list[str], feedback: str, n: int, step: int = 0) -> list[str]:
    """The scripted solver's action for the page (``harness.solvers.solve_step``; the task from the
    page's URL), as the policy's one candidate; none when it sees nothing to do."""
    action = solve_step(miniwob_task(obs.url) or "", obs.goal, obs.axtree)
    return [action] if action else []


def miniwob_policy(config: MiniWoBSearch, llm):
    """``--policy solver``: ``solver_propose``; else the AXTree policy on ``llm``."""
    return solver_propose if config.policy == SOLVER else axtree_policy(config, llm)


def row(config: MiniWoBSearch, task: dict, episode, first_obs=None) -> dict:
    """The result line, with the seed and the goal the seed drew (the first observation's)."""
    out = base_row(task, episode)
    out.update(seed=task["seed"], intent=first_obs.goal if first_obs is not None else task["intent"])
    return out


def trajectory_site(task: dict, obs) -> str:
    return task["sites"][0]


def summarize(config: MiniWoBSearch, rows: list[dict], baseline: dict | None) -> dict:
    out = run_summary(rows)
    out = {"per_task": out.pop("sites"), **out}
    if baseline:
        out["baseline_success_rate"] = baseline["macro"]["success_rate"]
        diff, out["task_difference"] = baseline_difference(out["per_task"], out["macro"]["success_rate"],
                                                           baseline.get("per_task", {}), out["baseline_success_rate"])
        if diff is not None:
            out["difference"] = diff
    return out


def report(config: MiniWoBSearch, summary: dict, baseline: dict | None) -> None:
    rates = {k: round(v["success_rate"], 3) for k, v in summary["per_task"].items()}
    print(f"success rate {summary['macro']['success_rate']} over {summary['tasks']} episodes: {rates}",
          file=sys.stderr)


MINIWOB = Benchmark("search.miniwob", MiniWoBSearch, tasks, site_harnesses,
                    agent=replace(AXTREE, policy=miniwob_policy),
                    resume_settings=RESUME_SETTINGS + ("max_format_errors", "policy_axtree_chars"), row=row,
                    summarize=summarize, report=report, trajectory_site=trajectory_site)


def build_parser():
    return search_parser(MINIWOB, doc=__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_cli(MINIWOB, argv, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
