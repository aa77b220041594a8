"""The one search runner: a benchmark's tasks, one episode each (``search.loop``), one run folder
with resume, one summary. Every search CLI (``python -m search.webarena``, ``search.mag``, ...) is
``main(Benchmark, argv)``; flows call ``run_search(Benchmark, config)`` with a typed config.

    from search.runner import run_search
    from search.webarena import WebArenaLite, WebArenaSearch
    summary = run_search(WebArenaLite, WebArenaSearch(prm="none", policy="embedded", demo=True, out="runs/x"))
    summary["macro"]["success_rate"]

A benchmark is one module with a ``Benchmark`` subclass, built once per run with its config:

    name                       the CLI's module ('search.webarena'): messages, --help
    Config                     its ``SearchConfig`` subclass (its own flags are its own fields)
    add_args(ap)               (classmethod) its own flags
    task_key                   the task config's id key ('task_id')
    resume_settings            config fields a ``--resume`` must share with the earlier run
    tasks()                    the task configs, checked before any model loads or browser starts
                               (raise ``SetupError``: missing variables, unreachable sites, ...)
    agent()                    how its episodes act (``search.agent.AXTreeAgent``, ``search.mag_agent.MagAgent``)
    policy(llm)                the policy's ``propose`` for an ``llm.LLMConfig``
    harness_kwargs             ``BrowserHarness`` options (MAG: viewport, action subsets)
    site_harnesses()           ``task -> BrowserHarness`` on the real sites (``--demo``: the demo shop instead)
    row(task, episode)         the task's result line (``base_row`` plus its own scores)
    on_step(task, step, obs)   after each step, beside its JSONL line (MAG: screenshots)
    summarize(rows, baseline)  ``summary.json`` (``run_summary`` plus its own columns)
    report(summary, baseline)  extra files and the line printed at the end
    trajectories               True: episodes also become canonical trajectories (``search.trajectories``)
    trajectory_site(task, obs) the canonical ``site`` of an observation (default: ``data.sites.site_of`` its URL)

A task config may carry its own ``seed`` (MiniWoB: one episode per task and seed); else the run's
``--seed`` is every episode's.

Run folder (``--out``): ``tasks/<task_id>.jsonl`` (one ``step`` line per step, flushed, then one
``result`` line), ``summary.json``, ``versions.json``, ``run.json`` (the resume settings, the run's
id, and what the models ran with: ``model_settings``),
and for benchmarks with ``trajectories`` ``trajectories.parquet`` (``search.trajectories``). ``--resume``
keeps the tasks the agent finished (their last line is an evaluated result), runs environment
failures again, and refuses a folder whose ``run.json`` has other ``resume_settings``.

Settings that decide what a model sees are named options, fields of the config with their flags
declared from the fields (``declared_fields``, ``data.config``): ``--prm-axtree-chars`` (every
search), ``--policy-axtree-chars`` (AXTree policies: ``AXTreeSearch``), ``--prm-device`` and
``--prm-dtype`` (a local PRM, ``prm.judge.placement``). A benchmark's ``policy_max_tokens`` is its
policy's ``max_tokens`` unless given (MAG: 1,024); a PRM that generates gets 1,024 unless given.

Progress (``data.progress``): a bar of the run's episodes and one of the current episode's steps
(of ``max_steps``), with rates and ETAs, on stderr; a line per finished task; the run ends with
one summary line (``summary_line``).

``--workers N`` (N > 1) runs the episodes in parallel, as Prefect tasks on a local Dask cluster of N
worker processes; ``--dask-address`` sends them to an existing Dask scheduler (``search.workers``). A result
line names the process that ran it (``worker``: ``host:pid``).

``summary.json`` always holds ``macro.success_rate`` (success per site, ``sites``, macro-averaged),
``tasks``, ``terminations``, the environment failures (``env_failures``, ``env_failed_tasks``:
counted as tasks not solved, never dropped from the denominator), ``totals`` (the step counts of
``search.loop.STEP_COUNTS`` summed), ``prm``, ``policy`` and ``n``.

Exit codes: 0; 2 when the setup is wrong (nothing ran: tasks, flags, ``WA_*`` variables, sites,
a resume with other settings, a missing baseline); 1 when no task could run (every task ended in
an environment failure, e.g. ``site_unreachable``), after the summary is written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from data.config import make_parser
from data.judgment import DEFAULT_BUDGET
from data.progress import done_line, progress, say
from prm.judge import DEVICES, DTYPES       # prm.judge imports torch only when a model loads
from search.loop import run_episode, sum_counts

POLICY_AXTREE_CHARS = 12_000        # the policy's AXTree characters (~3k tokens), as the PRM's DEFAULT_BUDGET


class SetupError(RuntimeError):
    """Something the run needs is missing; the message says what (exit code 2)."""


@dataclass
class SearchConfig:
    """One search run: the flags every search CLI shares (a benchmark's config adds its own)."""

    prm: str                                   # a folder, 'embedded', a model name at the PRM's base_url, or 'none'
    policy: str                                # a folder, 'embedded', or a model name at the policy's base_url
    out: str = "runs/search"
    n: int = 5                                 # candidates per step (paper: 5)
    task_ids: list[int | str] | None = None
    max_steps: int = 30
    max_format_errors: int | None = None       # steps in a row without a valid candidate that end it (None: no limit)
    seed: int = 0
    both_orders: bool = False
    # 'auto': score-both for a local PRM (llm.scoring: always a verdict, no position bias), generate
    # at an endpoint; or generate | score | score-both explicitly (local PRMs only; prm.judge.JUDGE_MODES)
    prm_judge_mode: str = "auto"
    resume: bool = False
    baseline: str | None = None                # a baseline run's folder
    demo: bool = False                         # the built-in demo task on a local shop
    prm_prompt_template: str | None = None
    prm_llm: dict = field(default_factory=dict)       # ``llm.LLMConfig`` settings given for the PRM
    policy_llm: dict = field(default_factory=dict)    # ... and for the policy (base_url, max_tokens, ...)
    workers: int = 1                           # episodes in parallel (> 1: Prefect tasks on a local Dask cluster)
    dask_address: str | None = None            # an existing Dask scheduler for the episodes instead
    # Fields with a ``help`` are flags declared here (``data.config``: ``--prm-axtree-chars`` ...).
    prm_axtree_chars: int = field(default=DEFAULT_BUDGET, metadata={"min": 1,
        "metavar": "CHARS", "help": "AXTree characters in each PRM prompt (data.judgment.budget_axtree: cut "
                                    "around the two targets; MAG: the menu in the AXTree section)"})
    prm_device: str = field(default="auto", metadata={
        "choices": DEVICES, "help": "where a local PRM folder loads (auto: cuda when one is visible, else cpu)"})
    prm_dtype: str = field(default="auto", metadata={
        "choices": DTYPES, "help": "a local PRM's weights (auto: bfloat16 on a GPU, float32 on the CPU)"})

    @property
    def guided(self) -> bool:
        return self.prm.lower() != "none"

    def check(self) -> None:
        """ValueError naming a bad setting."""
        if self.n < 1 or self.max_steps < 1 or self.workers < 1:
            raise ValueError("--n, --max-steps and --workers must be at least 1")
        for name in ("prm_axtree_chars", "policy_axtree_chars"):
            if getattr(self, name, 1) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if self.prm_device not in DEVICES or self.prm_dtype not in DTYPES:
            raise ValueError(f"--prm-device is one of {DEVICES}, --prm-dtype one of {DTYPES}")
        from search.tournament import prm_format

        prm_format(self)            # a bad --prm-prompt-template
        if self.guided:
            prm_judge_mode(self, prm_llm_config(self).is_local)     # a scoring mode at an endpoint


@dataclass
class AXTreeSearch(SearchConfig):
    """A search whose policy reads the AXTree (``search.agent.Policy``: WebArena-Lite, MiniWoB)."""

    policy_axtree_chars: int = field(default=POLICY_AXTREE_CHARS, metadata={"min": 1,
        "metavar": "CHARS", "help": "AXTree characters in each policy prompt (data.judgment.budget_axtree: the "
                                    "root line first, then lines in page order until the budget is spent)"})


class Benchmark:
    """What a benchmark plugs into the runner; see the module docstring."""

    name = "search"
    Config = SearchConfig
    task_key = "task_id"
    resume_settings = ("prm", "policy", "n", "max_steps", "seed", "both_orders", "prm_judge_mode", "demo",
                       "prm_axtree_chars")
    policy_max_tokens: int | None = None     # the policy's max_tokens unless given (None: LLMConfig's default)
    harness_kwargs: dict = {}
    flag_help: dict = {}            # help texts of the shared flags, where the benchmark says it better
    trajectories = False            # write ``trajectories.parquet`` (observations are AXTrees)

    def __init__(self, config: SearchConfig):
        self.config = config

    @classmethod
    def add_args(cls, ap: argparse.ArgumentParser) -> None:
        pass

    def tasks(self) -> list[dict]:
        raise NotImplementedError

    def agent(self):
        raise NotImplementedError

    def policy(self, llm):
        raise NotImplementedError

    def site_harnesses(self):
        raise NotImplementedError

    def row(self, task: dict, episode) -> dict:
        return base_row(task, self.task_key, episode)

    def on_step(self, task: dict, step, obs) -> None:
        pass

    def summarize(self, rows: list[dict], baseline: dict | None) -> dict:
        return run_summary(rows)

    def report(self, summary: dict, baseline: dict | None) -> None:
        pass

    def trajectory_site(self, task: dict, obs) -> str:
        from data.sites import site_of

        return site_of(obs.url)


# -- the run ------------------------------------------------------------------------------------

def run_search(benchmark: type[Benchmark], config: SearchConfig) -> dict:
    """Run (or resume) ``config`` on ``benchmark``; write the run folder; return the summary.
    ``SetupError`` before anything heavy starts when the setup is wrong."""
    bench = benchmark(config)
    run = RunFolder(Path(config.out))
    settings = {k: getattr(config, k) for k in bench.resume_settings}
    try:
        config.check()
        tasks = bench.tasks()
        baseline = read_summary(config.baseline) if config.baseline else None
        if config.resume:
            run.check_settings(settings, {f.name: f.default for f in fields(benchmark.Config)})
        recorded = model_settings(bench)
    except (ValueError, OSError) as e:
        raise SetupError(str(e)) from e
    clock = time.perf_counter()
    todo, rows = run.start(tasks, bench.task_key, config.resume, settings, recorded)
    resumed = len(rows)
    if todo and (config.workers > 1 or config.dask_address):
        from search.workers import run_on_dask

        rows += run_on_dask(benchmark, config, todo, run.run_id)
    elif todo:
        with contextlib.ExitStack() as stack:
            run_one = episode_runner(bench, run, stack)
            with progress(len(todo), f"{benchmark.name} episodes", "episode") as bar:
                for task in todo:
                    rows.append(run_one(task))
                    bar.update(1)
    if bench.trajectories:
        from search.trajectories import write_run_trajectories

        write_run_trajectories(run.out, [t[bench.task_key] for t in tasks])
    summary = bench.summarize(rows, baseline)
    summary.update(prm=config.prm, policy=config.policy, n=config.n)
    run.write("summary.json", summary)
    bench.report(summary, baseline)
    print(summary_line(benchmark.name, summary, len(rows) - resumed, resumed, sum(r.get("n_steps") or 0 for r in rows[resumed:]),
                       time.perf_counter() - clock, run.out / "summary.json"), file=sys.stderr)
    return summary


def summary_line(name: str, summary: dict, ran: int, resumed: int, steps: int, seconds: float, path) -> str:
    """The line a search command ends with (``data.progress.done_line``): tasks run and resumed,
    the macro success rate, the environment failures, the steps taken, the time, where the summary is."""
    rate = (summary.get("macro") or {}).get("success_rate")
    parts = [f"{ran} task(s) run" + (f", {resumed} resumed" if resumed else ""),
             f"macro success {rate:.3f}" if rate is not None else "macro success -",
             f"{summary.get('env_failures', 0)} environment failure(s)", f"{steps} step(s)"]
    return done_line(name, ", ".join(parts), seconds, f"summary in {path}")


def episode_runner(bench: Benchmark, run: RunFolder, stack: contextlib.ExitStack, step_progress: bool = True):
    """``run_one(task) -> result row``, with the models, the agent and the harness factory loaded
    once (per process: the workers of ``search.workers`` call it too); ``stack`` holds what must
    outlive the episodes (the demo shop). ``step_progress``: a bar of the episode's steps (up to
    ``max_steps``, with an ETA) on stderr."""
    propose, judge_for = load_models(bench)
    agent = bench.agent()
    if bench.config.demo:
        from search.demo_site import Shop, demo_harness

        make_harness = demo_harness(stack.enter_context(Shop()), **bench.harness_kwargs)
    else:
        make_harness = bench.site_harnesses()

    def run_one(task: dict) -> dict:
        clock = time.perf_counter()
        keep = None
        if bench.trajectories:
            from search.trajectories import trajectory_keeper

            keep = trajectory_keeper(bench, run.out, run.run_id, task)
        with progress(bench.config.max_steps, f"task {task[bench.task_key]} steps", "step", enabled=step_progress,
                      leave=False) as steps, run.task_log(task[bench.task_key]) as log:
            row = run_task(bench, task, make_harness, agent, propose, judge_for, log, keep, steps)
        say(f"task {row['task_id']} ({row['site']}): {row['termination']}, reward {row['reward']}, "
            f"{row['n_steps']} steps, {time.perf_counter() - clock:.0f}s")
        return row
    return run_one


def run_task(bench: Benchmark, task: dict, make_harness, agent, propose, judge_for, log, keep=None,
             steps=None) -> dict:
    """One task: one episode in ``make_harness(task)``, a JSONL line per step, the result row;
    ``keep(decided, final_observation, row)`` gets the steps with the observations they were
    decided on (``search.trajectories``); ``steps`` (a progress bar) advances by one a step."""
    c = bench.config
    decided = []

    def on_step(step, obs):
        log({"type": "step", **asdict(step)})
        decided.append((step, obs))
        bench.on_step(task, step, obs)
        if steps is not None:
            done = getattr(step, "code", None) or getattr(step, "chosen", None) or getattr(step, "error", "")
            steps.set_postfix_str(str(done or "-")[:40], refresh=False)
            steps.update(1)

    with make_harness(task) as harness:
        episode = run_episode(harness, propose, judge_for, n=c.n, max_steps=c.max_steps, seed=task.get("seed", c.seed),
                              max_format_errors=c.max_format_errors, both_orders=c.both_orders,
                              on_step=on_step, agent=agent)
        final = getattr(harness, "observation", None)
    row = {**bench.row(task, episode), "worker": f"{socket.gethostname()}:{os.getpid()}"}
    log(row)
    if keep:
        keep(decided, final, row)
    return row


def nothing_ran(summary: dict) -> str | None:
    """Why no task could run (every task ended in an environment failure), else None."""
    if summary.get("tasks") and summary.get("env_failures") == summary["tasks"]:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(summary.get("terminations", {}).items()))
        return f"no task could run: every task ended in an environment failure ({why})"
    return None


# -- models -------------------------------------------------------------------------------------

def model_config(name: str, given: dict, temperature: float | None = None):
    """An ``llm.LLMConfig`` for a model named on the command line (a folder, 'embedded', or a
    name at ``given['base_url']``) and the settings ``given`` for it; ``temperature`` is the
    default when none is given."""
    from llm import LLMConfig

    cfg = replace(LLMConfig(), **given)
    if "model" not in given:
        cfg = replace(cfg, model=None if name == "embedded" else name)
    if temperature is not None and "temperature" not in given:
        cfg = replace(cfg, temperature=temperature)
    return cfg.validate()


def prm_llm_config(config: SearchConfig):
    """The PRM's ``LLMConfig``: as ``model_config``, and when it generates judgments (behind an
    endpoint, or a local PRM in ``generate`` mode) ``max_tokens`` >= 1024
    (``prm.judge.GENERATE_MAX_TOKENS``: a full judgment fits) unless given."""
    from prm.judge import generate_max_tokens

    cfg = model_config(config.prm, config.prm_llm)
    mode = prm_judge_mode(config, cfg.is_local)
    return generate_max_tokens(cfg, mode, given="max_tokens" in config.prm_llm)


def policy_llm_config(config: SearchConfig, max_tokens: int | None = None):
    """The policy's ``LLMConfig``: N samples at temperature 1.0 when guided, one greedy sample
    for the baseline, unless a temperature is given; ``max_tokens`` (a benchmark's
    ``policy_max_tokens``: MAG's 1,024) unless given."""
    cfg = model_config(config.policy, config.policy_llm, 1.0 if config.guided else 0.0)
    if max_tokens is not None and "max_tokens" not in config.policy_llm:
        cfg = replace(cfg, max_tokens=max_tokens)
    return cfg


def prm_judge_mode(config: SearchConfig, local: bool) -> str:
    """The PRM's verdict mode: ``auto`` is score-both for a local model, generate at an endpoint
    (an endpoint only generates: another mode there is an error)."""
    mode = config.prm_judge_mode
    if mode == "auto":
        return "score-both" if local else "generate"
    if not local and mode != "generate":
        raise ValueError(f"--prm-judge-mode {mode} needs a local PRM (a folder or 'embedded'); an endpoint only generates")
    return mode


def judge_factory(config: SearchConfig):
    """``judge_for(obs, history) -> pair judge`` over the PRM (``prm.judge``), in the
    comparative-judgment format or ``--prm-prompt-template``'s; None for ``--prm none``."""
    if not config.guided:
        return None
    from prm.judge import make_judge
    from search.tournament import prm_format, prm_pair_judge, prm_state

    llm_config = prm_llm_config(config)
    judge = make_judge(llm_config, mode=prm_judge_mode(config, llm_config.is_local), device=config.prm_device,
                       dtype=config.prm_dtype)
    fmt = prm_format(config)

    def judge_for(obs, history):
        return prm_pair_judge(judge, prm_state(obs, history), budget=config.prm_axtree_chars, fmt=fmt)
    return judge_for


def load_models(bench: Benchmark):
    """(propose, judge_for); models load here, after the setup checks."""
    return bench.policy(policy_llm_config(bench.config, bench.policy_max_tokens)), judge_factory(bench.config)


def model_settings(bench: Benchmark) -> dict:
    """What ``run.json`` records of the models beside the resume settings: the token limits in
    force (given or defaulted) and where a local PRM loads (``auto`` resolved on this machine)."""
    c = bench.config
    policy = policy_llm_config(c, bench.policy_max_tokens)
    out = {"policy_max_tokens": policy.max_tokens, "policy_temperature": policy.temperature}
    if c.guided:
        from prm.judge import placement

        prm = prm_llm_config(c)
        out.update(prm_max_tokens=prm.max_tokens, prm_judge_mode_used=prm_judge_mode(c, prm.is_local),
                   prm_device=c.prm_device, prm_dtype=c.prm_dtype)
        if prm.is_local:
            out["prm_placement"] = dict(zip(("device", "dtype"), placement(c.prm_device, c.prm_dtype)))
    return out


# -- the run folder -----------------------------------------------------------------------------

class RunFolder:
    """``--out``: task logs, settings, versions and the summary (see the module docstring).
    ``run_id`` names the run in its trajectories' ids; a resume keeps the earlier run's."""

    def __init__(self, out: Path, run_id: str | None = None):
        self.out = Path(out)
        self.tasks = self.out / "tasks"
        self.run_id = run_id or uuid.uuid4().hex[:12]

    def check_settings(self, settings: dict, defaults: dict) -> None:
        """SetupError when the earlier run's ``run.json`` has other settings (a key it lacks
        means the default: it was written before the setting existed)."""
        path = self.out / "run.json"
        if not path.exists():
            return
        before = json.loads(path.read_text())
        if changed := sorted(k for k in settings if before.get(k, defaults.get(k)) != settings[k]):
            raise SetupError(f"--resume in {self.out}: settings differ from the earlier run ({', '.join(changed)}); "
                             "use another --out")

    def start(self, tasks: list[dict], key: str, resume: bool, settings: dict,
              recorded: dict | None = None) -> tuple[list[dict], list[dict]]:
        """Create the folder, write ``versions.json`` and ``run.json`` (the resume ``settings``,
        then what is only ``recorded``: ``model_settings``); with ``resume``, keep the finished
        tasks' result rows. Returns (tasks still to run, result rows already there)."""
        self.tasks.mkdir(parents=True, exist_ok=True)
        before = self.out / "run.json"
        if resume and before.exists():
            self.run_id = json.loads(before.read_text()).get("run_id", self.run_id)
        self.write("versions.json", versions())
        self.write("run.json", {**settings, **(recorded or {}), "run_id": self.run_id})
        done = self.finished() if resume else {}
        todo = [t for t in tasks if t[key] not in done]
        say(f"{len(tasks)} tasks, {len(done)} already done, {len(todo)} to run")
        return todo, [done[t[key]] for t in tasks if t[key] in done]

    def finished(self) -> dict:
        """task id -> result line of the tasks the agent finished: their JSONL ends with an
        evaluated result. Environment failures run again."""
        done = {}
        for f in self.tasks.glob("*.jsonl"):
            lines = [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
            if lines and lines[-1].get("type") == "result" and lines[-1].get("evaluated"):
                done[lines[-1]["task_id"]] = lines[-1]
        return done

    @contextlib.contextmanager
    def task_log(self, task_id):
        """``log(row)`` appends a flushed line to ``tasks/<task_id>.jsonl`` (a crash keeps the
        finished lines)."""
        with (self.tasks / f"{task_id}.jsonl").open("w") as f:
            def log(row):
                f.write(json.dumps(row, default=str) + "\n")
                f.flush()
            yield log

    def write(self, name: str, obj) -> None:
        (self.out / name).write_text(json.dumps(obj, indent=2))


def read_summary(folder: str) -> dict:
    """A finished run's ``summary.json`` (``--baseline``)."""
    path = Path(folder) / "summary.json"
    if not path.exists():
        raise SetupError(f"--baseline {folder}: no summary.json there (run the baseline first)")
    return json.loads(path.read_text())


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for p in ("surfprm", "browsergym-core", "browsergym-webarenalite", "browsergym-miniwob", "miniwob", "playwright",
              "transformers", "torch"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


# -- rows and the summary -----------------------------------------------------------------------

def site_key(task: dict) -> str:
    """A task's site for the per-site rates: its one site, or 'multi'."""
    return task["sites"][0] if len(task["sites"]) == 1 else "multi"


def base_row(task: dict, key: str, episode) -> dict:
    """The result line every benchmark writes: the task, the episode (without its steps), steps."""
    return {"type": "result", "task_id": task[key], "site": site_key(task), "intent": task["intent"],
            **{k: v for k, v in episode.to_dict().items() if k != "steps"}, "n_steps": len(episode.steps)}


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
    totals."""
    per, macro = site_success(rows, key)
    terminations: dict[str, int] = {}
    for r in rows:
        terminations[r["termination"]] = terminations.get(r["termination"], 0) + 1
    return {"sites": per, "macro": {"success_rate": macro}, "tasks": len(rows),
            "env_failures": sum(not r["evaluated"] for r in rows), "env_failed_tasks": env_failure_list(rows),
            "terminations": terminations, "totals": sum_counts([r.get("totals") or {} for r in rows])}


# -- the command line ---------------------------------------------------------------------------

def build_parser(benchmark: type[Benchmark], description: str = "", prog: str | None = None) -> argparse.ArgumentParser:
    """The flags every search CLI shares, then the benchmark's own, then the LLM flags (``prog``:
    the command as typed, default ``python -m <benchmark module>``)."""
    from llm import LLMConfig
    from search.tournament import add_prm_format_args

    d = {f.name: f.default for f in fields(benchmark.Config)}
    h = {"n": "candidates per step (paper: 5)", "task_ids": "task ids", "baseline":
         "a baseline run's folder: the summary adds the differences",
         "demo": "run the built-in demo task (a small shop on 127.0.0.1) instead: no sites needed",
         "seed": "every episode's seed (the task's reset, the bracket draws)", **benchmark.flag_help}
    ap = make_parser(prog=prog or f"python -m {benchmark.name}", description=description)
    ap.add_argument("--prm", required=True, help="PRM: a folder, 'embedded', a model name at --prm-base-url, or 'none'")
    ap.add_argument("--policy", required=True, help="policy: a folder, 'embedded', or a model name at --policy-base-url")
    ap.add_argument("--n", type=int, default=d["n"], help=h["n"])
    ap.add_argument("--task-ids", nargs="*", type=int, help=h["task_ids"])
    ap.add_argument("--max-steps", type=int, default=d["max_steps"])
    ap.add_argument("--both-orders", action="store_true", help="judge every match in both orders")
    ap.add_argument("--prm-judge-mode", choices=("auto", "generate", "score", "score-both"), default=d["prm_judge_mode"],
                    help="a local PRM's verdicts: generate a judgment and read its tag, score the two answer tags "
                         "(one order, or both orders combined); auto: score-both locally, generate at an endpoint")
    ap.add_argument("--seed", type=int, default=d["seed"], help=h["seed"])
    ap.add_argument("--out", default=d["out"], help="output folder")
    ap.add_argument("--resume", action="store_true", help="skip tasks already finished in --out")
    ap.add_argument("--baseline", help=h["baseline"])
    ap.add_argument("--demo", action="store_true", help=h["demo"])
    ap.add_argument("--workers", type=int, default=d["workers"],
                    help="episodes in parallel: N > 1 runs them as Prefect tasks on a local Dask cluster of N processes")
    ap.add_argument("--dask-address", default=None,
                    help="run the episodes on this Dask scheduler (tcp://host:8786) instead; --out must be shared")
    benchmark.add_args(ap)
    add_prm_format_args(ap)
    add_declared_args(ap, benchmark.Config)
    LLMConfig.add_args(ap, prefix="prm-")
    LLMConfig.add_args(ap, prefix="policy-")
    from prm.judge import GENERATE_MAX_TOKENS

    policy_default = benchmark.policy_max_tokens or LLMConfig.max_tokens
    for a in ap._actions:       # the token defaults in force here, which LLMConfig's own help cannot say
        if a.dest == "prm_max_tokens":
            a.help = (f"maximum completion tokens per judgment (default: {GENERATE_MAX_TOKENS} when the PRM "
                      f"generates, at an endpoint or in --prm-judge-mode generate; {LLMConfig.max_tokens} otherwise)")
        elif a.dest == "policy_max_tokens":
            a.help = f"maximum completion tokens per policy output (default: {policy_default})"
    return ap


def declared_fields(cls) -> list[str]:
    """The config fields whose flags ``data.config`` declares from the field (those with a ``help``)."""
    return [f.name for f in fields(cls) if "help" in f.metadata]


def add_declared_args(ap: argparse.ArgumentParser, cls) -> None:
    """``--{field}`` for each of ``declared_fields(cls)``, with its help, choices and default
    (``data.config.add_dataclass_args``); a flag left out keeps the field's default."""
    from data.config import add_dataclass_args

    names = set(declared_fields(cls))
    group = ap.add_argument_group("search settings")
    add_dataclass_args(group, cls, skip=tuple(f.name for f in fields(cls) if f.name not in names))


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


def config_from_args(benchmark: type[Benchmark], args: argparse.Namespace) -> SearchConfig:
    """The benchmark's typed config from its parsed flags."""
    declared = set(declared_fields(benchmark.Config))
    names = {f.name for f in fields(benchmark.Config)} - {"prm_llm", "policy_llm"}
    values = {k: getattr(args, k) for k in names if hasattr(args, k)
              and not (k in declared and getattr(args, k) is None)}          # a declared flag left out: the default
    return benchmark.Config(**values, prm_llm=llm_settings(args, "prm-"), policy_llm=llm_settings(args, "policy-"))


def parse_config(benchmark: type[Benchmark], argv: list[str] | None = None, description: str = "",
                 prog: str | None = None) -> SearchConfig:
    """Parse a search command line into the benchmark's config; bad flags exit 2 with usage."""
    ap = build_parser(benchmark, description, prog)
    args = ap.parse_args(argv)
    try:
        config = config_from_args(benchmark, args)
        config.check()
    except (ValueError, OSError) as e:
        ap.error(str(e))
    return config


def main(benchmark: type[Benchmark], argv: list[str] | None = None, description: str = "") -> int:
    """A search CLI: 0, 2 on a setup error, 1 when no task could run (module docstring)."""
    config = parse_config(benchmark, argv, description)
    try:
        summary = run_search(benchmark, config)
    except SetupError as e:
        print(f"{benchmark.name}: {e}", file=sys.stderr)
        return 2
    if why := nothing_ran(summary):
        print(f"{benchmark.name}: {why}", file=sys.stderr)
        return 1
    return 0
