"""The one search runner: a benchmark's tasks, one episode each (``search.loop``), one run folder
with resume, one summary. Every search CLI (``python -m search.webarena``, ``search.mag``, ...) is
``main(benchmark, argv)``; flows call ``run_search(benchmark, config)`` with a typed config.

    from search.runner import run_search
    from search.webarena import WEBARENA_LITE, WebArenaSearch
    summary = run_search(WEBARENA_LITE, WebArenaSearch(prm="none", policy="embedded", demo=True, out="runs/x"))
    summary["macro"]["success_rate"]

A benchmark is a ``Benchmark``: a dataclass of a few plain functions, each given the run's config
(its ``SearchConfig`` subclass, whose fields are the CLI's flags):

    name                       the CLI's module ('search.webarena'): messages, --help
    Config                     its ``SearchConfig`` subclass (its own flags are its own fields)
    tasks(config)              the task configs, checked before any model loads or browser starts
                               (raise ``SetupError``: missing variables, unreachable sites, ...)
    site_harnesses(config)     ``task -> BrowserHarness`` on the real sites (``--demo``: the demo shop instead)
    agent                      the agent kind (``search.loop.AgentKind``): its policy, the agent
                               (``get_action(obs) -> (action, info)``) and its page side; default
                               ``search.agent.AXTREE`` (BrowserGym actions), MAG's ``search.mag.agent.MAG``
    task_key                   the task config's id key ('task_id')
    resume_settings            config fields a ``--resume`` must share with the earlier run
    row(config, task, episode, first_obs)   the task's result line (default ``base_row``)
    on_step(config, task, step, obs)        after each step, beside its JSONL line (MAG: screenshots)
    summarize(config, rows, baseline)       ``summary.json`` (default ``run_summary``)
    report(config, summary, baseline)       extra files and lines printed at the end
    trajectory_site(task, obs)              the canonical ``site`` of an observation; set, episodes also
                                            become canonical trajectories (``search.trajectories``)

A task config may carry its own ``seed`` (MiniWoB: one episode per task and seed); else the run's
``--seed`` is every episode's.

Run folder (``--out``): ``tasks/<task_id>.jsonl`` (one ``step`` line per step, flushed, then one
``result`` line), ``summary.json``, ``versions.json``, ``run.json`` (the resume settings, the run's
id, and what the models ran with: ``model_settings``),
and for benchmarks with ``trajectory_site`` ``trajectories.parquet`` (``search.trajectories``). ``--resume``
keeps the tasks the agent finished (their last line is an evaluated result), runs environment
failures again, and refuses a folder whose ``run.json`` has other ``resume_settings``
(``search.episodes``: the models, the run folder, one task's episode).

Flags: every field of the benchmark's config is a flag with its help and default
(``cli.config``), and the two models' ``llm.LLMConfig`` flags come prefixed (``--prm-*``,
``--policy-*``). Settings that decide what a model sees: ``--prm-axtree-chars`` (every search),
``--policy-axtree-chars`` (AXTree policies: ``AXTreeSearch``), ``--prm-device`` and
``--prm-dtype`` (a local PRM, ``prm.judge.placement``). An agent kind's ``policy_llm`` class holds
its policy's defaults (MAG: 1,024 tokens); a PRM that generates gets 1,024 tokens unless given.

Progress (``cli.progress``): a bar of the run's episodes and one of the current episode's steps
(of ``max_steps``), with rates and ETAs, on stderr; a line per finished task; the run ends with
one summary line (``summary_line``).

``--workers N`` (N > 1) runs the episodes in parallel, as Prefect tasks on a local Dask cluster of N
worker processes; ``--dask-address`` sends them to an existing Dask scheduler (``search.workers``). A result
line names the process that ran it (``worker``: ``host:pid``).

``summary.json`` always holds ``macro.success_rate`` (success per site, ``sites``, macro-averaged),
``tasks``, ``terminations``, the environment failures (``env_failures``, ``env_failed_tasks``:
counted as tasks not solved, never dropped from the denominator), ``totals`` (the step counts of
``search.tournament.STEP_COUNTS`` summed), ``prm``, ``policy``, ``n`` and ``prm_calls`` (the PRM's
prompts; a guided run whose PRM was never called prints one line ``PRM never called: <why>``, e.g.
a policy that proposes one candidate per step); with ``--baseline``,
``baseline_success_rate`` and ``difference`` (macro rate minus the baseline's) where the
benchmark compares.

Exit codes: 0; 2 when the setup is wrong (nothing ran: tasks, flags, ``WA_*`` variables, sites,
a resume with other settings, a missing baseline); 1 when no task could run (every task ended in
an environment failure, e.g. ``site_unreachable``), after the summary is written.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from cli.config import Configurable, make_parser
from cli.errors import error_exit
from cli.progress import done_line, progress
from judgment.format import DEFAULT_BUDGET
from llm import LLMConfig
from prm.judge import DEVICES, DTYPES, GENERATE_MAX_TOKENS  # prm.judge imports torch only when a model loads
from search.agent import AXTREE, AXTREE_BUDGET
from search.episodes import (
    RunFolder,
    SetupError,
    episode_runner,
    model_settings,
    prm_judge_mode,
    prm_llm_config,
    read_summary,
    robustness,
)
from search.loop import AgentKind, sum_counts

__all__ = ["AXTreeSearch", "Benchmark", "SearchConfig", "SetupError", "base_row", "build_parser", "main",
           "nothing_ran", "parse_config", "run_search", "run_summary"]
JUDGE_MODES = ("auto", "generate", "score", "score-both")


@dataclass
class SearchConfig(Configurable):
    """One search run: the flags every search CLI shares (a benchmark's config adds its own)."""

    ARG_GROUP = "search"

    prm: str = field(metadata={"help": "PRM: a folder, 'embedded', a model name at --prm-base-url, or 'none'"})
    policy: str = field(metadata={"help": "policy: a folder, 'embedded', or a model name at --policy-base-url"})
    out: str = field(default="runs/search", metadata={"help": "output folder"})
    n: int = field(default=5, metadata={"min": 1, "help": "candidates per step (paper: 5)"})
    task_ids: list[int] | None = field(default=None, metadata={"nargs": "*", "help": "task ids"})
    max_steps: int = field(default=30, metadata={"min": 1, "help": "steps per episode at most"})
    max_format_errors: int | None = field(default=None, metadata={
        "help": "steps in a row without a valid candidate that end an episode (default: no limit)"})
    seed: int = field(default=0, metadata={"help": "every episode's seed (the task's reset, the bracket draws)"})
    both_orders: bool = field(default=False, metadata={"help": "judge every match in both orders"})
    prm_judge_mode: str = field(default="auto", metadata={
        "choices": JUDGE_MODES,
        "help": "a local PRM's verdicts: generate a judgment and read its tag, score the two answer tags (one "
                "order, or both orders combined); auto: score-both locally (llm.scoring: always a verdict, no "
                "position bias), generate at an endpoint"})
    resume: bool = field(default=False, metadata={"help": "skip tasks already finished in --out"})
    baseline: str | None = field(default=None, metadata={
        "help": "a baseline run's folder: the summary adds the differences"})
    demo: bool = field(default=False, metadata={
        "help": "run the built-in demo task (a small shop on 127.0.0.1) instead: no sites needed"})
    prm_prompt_template: str | None = field(default=None, metadata={
        "metavar": "FILE",
        "help": "render the PRM's prompts with a YAML template (user, optional system; judgment.format)"})
    prm_llm: dict = field(default_factory=dict)       # ``llm.LLMConfig`` settings given for the PRM (--prm-* flags)
    policy_llm: dict = field(default_factory=dict)    # ... and for the policy (base_url, max_tokens, ...)
    workers: int = field(default=1, metadata={
        "min": 1,
        "help": "episodes in parallel: N > 1 runs them as Prefect tasks on a local Dask cluster of N processes"})
    dask_address: str | None = field(default=None, metadata={
        "help": "run the episodes on this Dask scheduler (tcp://host:8786) instead; --out must be shared"})
    prm_axtree_chars: int = field(default=DEFAULT_BUDGET, metadata={
        "min": 1, "metavar": "CHARS", "help": "AXTree characters in each PRM prompt (judgment.axtree.budget_axtree: "
                                              "cut around the two targets; MAG: the menu in the AXTree section)"})
    prm_device: str = field(default="auto", metadata={
        "choices": DEVICES, "help": "where a local PRM folder loads (auto: cuda when one is visible, else cpu)"})
    prm_dtype: str = field(default="auto", metadata={
        "choices": DTYPES, "help": "a local PRM's weights (auto: bfloat16 on a GPU, float32 on the CPU)"})
    # OpenWebRL App. A.1 (harness.robust): the browser's retries, time-outs and blocklist
    start_retries: int = field(default=2, metadata={
        "min": 0, "help": "attempts at a task's start page after the first (OpenWebRL A.1: retried with backoff)"})
    start_backoff: float = field(default=1.0, metadata={
        "min": 0, "metavar": "S", "help": "seconds before the first retry, doubling at each further one"})
    startup_timeout: float = field(default=30.0, metadata={
        "min": 0.001, "metavar": "S", "help": "seconds for the browser launch, the task's set-up and its start page"})
    action_timeout: float = field(default=5.0, metadata={
        "min": 0.001, "metavar": "S", "help": "seconds for each action and the page loads it triggers"})
    screenshot_timeout: float = field(default=10.0, metadata={
        "min": 0.001, "metavar": "S", "help": "seconds for each screenshot"})
    host_blocklist: str | None = field(default=None, metadata={
        "metavar": "FILE",
        "help": "hosts never visited, one a line; a start page that fails every retry adds its host"})

    @property
    def guided(self) -> bool:
        return self.prm.lower() != "none"

    def check(self) -> None:
        """ValueError naming a bad setting (for a config built in Python; flags are checked as parsed)."""
        if self.n < 1 or self.max_steps < 1 or self.workers < 1:
            raise ValueError("--n, --max-steps and --workers must be at least 1")
        for name in ("prm_axtree_chars", "policy_axtree_chars"):
            if getattr(self, name, 1) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.prm_device not in DEVICES or self.prm_dtype not in DTYPES:
            raise ValueError(f"--prm-device is one of {DEVICES}, --prm-dtype one of {DTYPES}")
        from search.tournament import prm_format

        prm_format(self)            # a bad --prm-prompt-template
        robustness(self)            # negative retries, a time-out of 0
        if self.guided:
            prm_judge_mode(self, prm_llm_config(self).is_local)     # a scoring mode at an endpoint


@dataclass
class AXTreeSearch(SearchConfig):
    """A search whose policy reads the AXTree (``search.agent.Policy``: WebArena-Lite, MiniWoB)."""

    element_feedback: bool = field(default=True, metadata={
        "help": "tell the policy which element lay under a click and which has focus after typing (OpenWebRL A.2)"})

    max_format_errors: int | None = field(default=3, metadata={
        "help": "steps in a row without a valid candidate that end an episode"})
    policy_axtree_chars: int = field(default=AXTREE_BUDGET, metadata={
        "min": 1, "metavar": "CHARS",
        "help": "AXTree characters in each policy prompt (judgment.axtree.budget_axtree: "
                "the root line first, then lines in page order until the budget is spent)"})


@dataclass
class PRMLLMConfig(LLMConfig):
    """The PRM's ``LLMConfig`` (``--prm-*`` flags): ``max_tokens`` per judgment, raised to
    ``prm.judge.GENERATE_MAX_TOKENS`` unless given when the PRM generates (``prm_llm_config``)."""

    max_tokens: int = field(default=LLMConfig.max_tokens, metadata={
        "min": 1, "help": f"maximum completion tokens per judgment ({GENERATE_MAX_TOKENS} when the PRM generates: "
                          "at an endpoint or in --prm-judge-mode generate)"})


RESUME_SETTINGS = ("prm", "policy", "n", "max_steps", "seed", "both_orders", "prm_judge_mode", "demo",
                   "prm_axtree_chars")


def base_row(task: dict, episode, key: str = "task_id") -> dict:
    """The result line every benchmark writes: the task, the episode (without its steps), steps."""
    return {"type": "result", "task_id": task[key], "site": site_key(task), "intent": task["intent"],
            **{k: v for k, v in episode.to_dict().items() if k != "steps"}, "n_steps": len(episode.steps)}


def default_row(config, task: dict, episode, first_obs=None) -> dict:
    return base_row(task, episode)


def default_summary(config, rows: list[dict], baseline: dict | None) -> dict:
    return run_summary(rows)


@dataclass(frozen=True)
class Benchmark:
    """What a benchmark plugs into the runner: plain functions of the run's config (see the
    module docstring); the defaults are the BrowserGym-action agent's and the shared summary's."""

    name: str
    Config: type[SearchConfig]
    tasks: Callable[[SearchConfig], list[dict]]
    site_harnesses: Callable[[SearchConfig], Callable]
    agent: AgentKind = AXTREE
    task_key: str = "task_id"
    resume_settings: tuple[str, ...] = RESUME_SETTINGS
    row: Callable = default_row
    on_step: Callable | None = None
    summarize: Callable = default_summary
    report: Callable | None = None
    trajectory_site: Callable | None = None


# -- the run ------------------------------------------------------------------------------------

def run_search(benchmark: Benchmark, config: SearchConfig) -> dict:
    """Run (or resume) ``config`` on ``benchmark``; write the run folder; return the summary.
    ``SetupError`` before anything heavy starts when the setup is wrong."""
    run = RunFolder(Path(config.out))
    settings = {k: getattr(config, k) for k in benchmark.resume_settings}
    try:
        config.check()
        tasks = benchmark.tasks(config)
        baseline = read_summary(config.baseline) if config.baseline else None
        if config.resume:
            run.check_settings(settings, {f.name: f.default for f in fields(benchmark.Config)})
        recorded = model_settings(benchmark, config)
    except (ValueError, OSError) as e:
        raise SetupError(str(e)) from e
    clock = time.perf_counter()
    todo, rows = run.start(tasks, benchmark.task_key, config.resume, settings, recorded)
    resumed = len(rows)
    if todo and (config.workers > 1 or config.dask_address):
        from search.workers import run_on_dask

        rows += run_on_dask(benchmark, config, todo, run.run_id)
    elif todo:
        with contextlib.ExitStack() as stack:
            run_one = episode_runner(benchmark, config, run, stack)
            with progress(len(todo), f"{benchmark.name} episodes", "episode") as bar:
                for task in todo:
                    rows.append(run_one(task))
                    bar.update(1)
    if benchmark.trajectory_site:
        from search.trajectories import write_run_trajectories

        write_run_trajectories(run.out, [t[benchmark.task_key] for t in tasks])
    summary = benchmark.summarize(config, rows, baseline)
    summary.update(prm=config.prm, policy=config.policy, n=config.n, prm_calls=prm_calls(rows))
    run.write("summary.json", summary)
    if benchmark.report:
        benchmark.report(config, summary, baseline)
    if why := prm_never_called(config, rows):
        print(f"PRM never called: {why}", file=sys.stderr)
    steps_run = sum(r.get("n_steps") or 0 for r in rows[resumed:])
    print(summary_line(benchmark.name, summary, len(rows) - resumed, resumed, steps_run,
                       time.perf_counter() - clock, run.out / "summary.json"), file=sys.stderr)
    return summary


def summary_line(name: str, summary: dict, ran: int, resumed: int, steps: int, seconds: float, path) -> str:
    """The line a search command ends with (``cli.progress.done_line``): tasks run and resumed,
    the macro success rate, the environment failures, the steps taken, the time, where the summary is."""
    rate = (summary.get("macro") or {}).get("success_rate")
    parts = [f"{ran} task(s) run" + (f", {resumed} resumed" if resumed else ""),
             f"macro success {rate:.3f}" if rate is not None else "macro success -",
             f"{summary.get('env_failures', 0)} environment failure(s)", f"{steps} step(s)"]
    return done_line(name, ", ".join(parts), seconds, f"summary in {path}")


def prm_calls(rows: list[dict]) -> int:
    """The PRM's prompts over the run (the steps' ``judge_calls``, both orders counted)."""
    return sum_counts([r.get("totals") or {} for r in rows])["judge_calls"]


def prm_never_called(config: SearchConfig, rows: list[dict]) -> str | None:
    """Why a guided run's PRM judged nothing (a silent zero otherwise: ``summary.json`` would
    still say ``n: 5``), else None; None for ``--prm none``, which has no PRM."""
    if not config.guided or not rows or prm_calls(rows):
        return None
    totals = sum_counts([r.get("totals") or {} for r in rows])
    steps = sum(r.get("n_steps") or 0 for r in rows)
    if not steps:
        return f"no episode took a step ({len(rows)} task(s), every one ended before its first step)"
    if config.n == 1:
        return "--n 1: the policy proposes one candidate per step, which needs no judge"
    if totals["proposed"] <= steps:
        return (f"the policy proposed at most one candidate per step ({totals['proposed']} candidates over {steps} "
                "steps; e.g. --policy solver), and one candidate needs no judge")
    return (f"no step kept two candidates after screening ({totals['proposed']} proposed over {steps} steps: "
            f"{totals['screened_invalid']} invalid, {totals['screened_duplicate']} duplicates merged)")


def nothing_ran(summary: dict) -> str | None:
    """Why no task could run (every task ended in an environment failure), else None."""
    if summary.get("tasks") and summary.get("env_failures") == summary["tasks"]:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(summary.get("terminations", {}).items()))
        return f"no task could run: every task ended in an environment failure ({why})"
    return None



# -- rows and the summary -----------------------------------------------------------------------

def site_key(task: dict) -> str:
    """A task's site for the per-site rates: its one site, or 'multi'."""
    return task["sites"][0] if len(task["sites"]) == 1 else "multi"


def solved(row: dict) -> bool:
    """An evaluated task with success (``success``, else a positive ``reward``)."""
    if not row["evaluated"]:
        return False
    return bool(row["success"]) if "success" in row else (row.get("reward") or 0) > 0


def site_success(rows: list[dict], key=lambda r: r["site"]) -> tuple[dict, float | None]:
    """(per site, or per ``key(row)``: tasks, evaluated, success, env_failures, success_rate; the
    macro-average of their rates). A rate counts every task run: an environment failure is a task
    not solved."""
    per: dict[str, dict] = {}
    for r in rows:
        s = per.setdefault(key(r), {"tasks": 0, "evaluated": 0, "success": 0, "env_failures": 0})
        s["tasks"] += 1
        if r["evaluated"]:
            s["evaluated"] += 1
            s["success"] += int(solved(r))
        else:
            s["env_failures"] += 1
    for s in per.values():
        s["success_rate"] = s["success"] / s["tasks"]
    rates = [s["success_rate"] for s in per.values()]
    return per, (sum(rates) / len(rates) if rates else None)


def baseline_difference(per: dict, macro: float | None, baseline_per: dict,
                        baseline_macro: float | None) -> tuple[float | None, dict]:
    """(macro rate minus the baseline's, per key: rate minus the baseline's) over the keys (sites,
    tasks) both runs have a rate for."""
    diff = macro - baseline_macro if macro is not None and baseline_macro is not None else None
    return diff, {k: v["success_rate"] - baseline_per[k]["success_rate"] for k, v in per.items()
                  if k in baseline_per and v["success_rate"] is not None
                  and baseline_per[k].get("success_rate") is not None}


def env_failure_list(rows: list[dict]) -> list[dict]:
    """The tasks that ended in an environment failure, with why."""
    return [{"task_id": r.get("task_id"), "site": r.get("site"), "termination": r["termination"],
             "error": str(r.get("error") or "")[:300]} for r in rows if not r["evaluated"]]


def run_summary(rows: list[dict], key=lambda r: r["site"]) -> dict:
    """What every search summary holds: success per site (or per ``key(row)``) and its
    macro-average over every task run, the environment failures beside them, terminations, step
    totals, and the harness's infrastructure failures per phase (``infra_diagnostics``: OpenWebRL
    A.1's records, each an ``infra_diagnostic`` line in its task's log)."""
    per, macro = site_success(rows, key)
    terminations: dict[str, int] = {}
    for r in rows:
        terminations[r["termination"]] = terminations.get(r["termination"], 0) + 1
    return {"sites": per, "macro": {"success_rate": macro}, "tasks": len(rows),
            "env_failures": sum(not r["evaluated"] for r in rows), "env_failed_tasks": env_failure_list(rows),
            "terminations": terminations, "totals": sum_counts([r.get("totals") or {} for r in rows]),
            "infra_diagnostics": dict(sum((Counter(r.get("infra_diagnostics") or {}) for r in rows), Counter()))}


# -- the command line ---------------------------------------------------------------------------

def build_parser(benchmark: Benchmark, prog: str | None = None, doc: str | None = None) -> argparse.ArgumentParser:
    """The benchmark config's flags, then the two models' ``LLMConfig`` flags (``--prm-*``,
    ``--policy-*``); ``prog``: the command as typed, default ``python -m <benchmark module>``."""
    ap = make_parser(prog=prog or f"python -m {benchmark.name}", doc=doc)
    benchmark.Config.add_args(ap)
    PRMLLMConfig.add_args(ap, prefix="prm-")
    benchmark.agent.policy_llm.add_args(ap, prefix="policy-")
    return ap


def llm_settings(args: argparse.Namespace, prefix: str) -> dict:
    """The ``LLMConfig`` settings a command line gives for ``prefix`` ('prm-'): those of its
    ``--<prefix>llm-config`` file, then its ``--<prefix>*`` flags."""
    import yaml

    from llm import LLMConfig

    dest = prefix.replace("-", "_")
    full = LLMConfig.from_args(args, prefix=prefix)         # checks the file and the values
    named = set()
    if path := getattr(args, f"{dest}llm_config", None):
        data = yaml.safe_load(Path(path).read_text()) or {}
        named |= set(data.get("llm", data))
    named |= {f.name for f in fields(LLMConfig) if getattr(args, dest + f.name, None) is not None}
    return {f.name: getattr(full, f.name) for f in fields(LLMConfig) if f.name in named}


def parse_config(benchmark: Benchmark, argv: list[str] | None = None, prog: str | None = None,
                 doc: str | None = None) -> SearchConfig:
    """Parse a search command line into the benchmark's config; bad flags exit 2 with usage."""
    ap = build_parser(benchmark, prog, doc)
    args = ap.parse_args(argv)
    try:
        config = replace(benchmark.Config.from_args(args), prm_llm=llm_settings(args, "prm-"),
                         policy_llm=llm_settings(args, "policy-"))
        config.check()
    except (ValueError, OSError) as e:
        ap.error(str(e))
    return config


def main(benchmark: Benchmark, argv: list[str] | None = None, doc: str | None = None) -> int:
    """A search CLI: 0, 2 on a setup error, 1 when no task could run (module docstring)."""
    config = parse_config(benchmark, argv, doc=doc)
    try:
        summary = run_search(benchmark, config)
    except SetupError as e:
        return error_exit(e, benchmark.name)
    if why := nothing_ran(summary):
        print(f"{benchmark.name}: {why}", file=sys.stderr)
        return 1
    return 0
