"""One search run's episodes: the models, the run folder, and one task's episode with its log
lines (``search.runner.run_search`` runs them here, ``search.workers`` in Dask workers).

    propose, judge_for = load_models(benchmark, config)       # after the setup checks
    run = RunFolder(Path(config.out))
    todo, done_rows = run.start(tasks, benchmark.task_key, config.resume, settings)
    with contextlib.ExitStack() as stack:
        run_one = episode_runner(benchmark, config, run, stack)
        rows = [run_one(task) for task in todo]

``benchmark`` is a ``search.runner.Benchmark`` and ``config`` its ``SearchConfig``; the run
folder's layout, the resume rules and the model settings are described in ``search.runner``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from cli.progress import progress, say
from search.loop import run_episode


class SetupError(RuntimeError):
    """Something the run needs is missing; the message says what (exit code 2)."""


# -- one episode per task -----------------------------------------------------------------------

def episode_runner(benchmark, config, run: RunFolder, stack: contextlib.ExitStack, step_progress: bool = True):
    """``run_one(task) -> result row``, with the models and the harness factory loaded once (per
    process: the workers of ``search.workers`` call it too); ``stack`` holds what must outlive the
    episodes (the demo shop). ``step_progress``: a bar of the episode's steps (up to
    ``max_steps``, with an ETA) on stderr."""
    propose, judge_for = load_models(benchmark, config)
    if config.demo:
        from search.demo_site import Shop, demo_harness

        make_harness = demo_harness(stack.enter_context(Shop()), **benchmark.agent.harness_options)
    else:
        make_harness = benchmark.site_harnesses(config)

    def make_agent(seed: int):
        return benchmark.agent.agent(config, propose, judge_for, seed)

    def run_one(task: dict) -> dict:
        clock = time.perf_counter()
        keep = None
        if benchmark.trajectory_site:
            from search.trajectories import trajectory_keeper

            keep = trajectory_keeper(benchmark, config, run.out, run.run_id, task)
        key = task[benchmark.task_key]
        with progress(config.max_steps, f"task {key} steps", "step", enabled=step_progress, leave=False) as steps, \
                run.task_log(key) as log:
            row = run_task(benchmark, config, task, make_harness, make_agent, log, keep, steps)
        say(f"task {row['task_id']} ({row['site']}): {row['termination']}, reward {row['reward']}, "
            f"{row['n_steps']} steps, {time.perf_counter() - clock:.0f}s")
        return row
    return run_one


def run_task(benchmark, config, task: dict, make_harness, make_agent, log, keep=None, steps=None) -> dict:
    """One task: one episode of ``make_agent(seed)`` in ``make_harness(task)``, a JSONL line per
    step, an ``infra_diagnostic`` line per infrastructure failure the harness recorded
    (``harness.robust``), the result row (``infra_diagnostics``: their count per phase);
    ``keep(decided, final_observation, row)`` gets the steps with the observations they were
    decided on (``search.trajectories``); ``steps`` (a progress bar) advances by one a step. A task
    config's own ``seed`` (MiniWoB) is its episode's, else the run's ``--seed``."""
    decided = []

    def on_step(step, obs):
        log({"type": "step", **asdict(step)})
        decided.append((step, obs))
        if benchmark.on_step:
            benchmark.on_step(config, task, step, obs)
        if steps is not None:
            done = getattr(step, "code", None) or getattr(step, "chosen", None) or getattr(step, "error", "")
            steps.set_postfix_str(str(done or "-")[:40], refresh=False)
            steps.update(1)

    seed = task.get("seed", config.seed)
    kind = benchmark.agent
    with make_harness(task) as harness:
        configure_harness(harness, config)
        episode = run_episode(harness, make_agent(seed), kind.execute, max_steps=config.max_steps, seed=seed,
                              max_format_errors=config.max_format_errors, on_step=on_step, reset=kind.reset,
                              result_class=kind.result_class)
        final = getattr(harness, "observation", None)
        diagnostics = list(getattr(harness, "diagnostics", []))
    for record in diagnostics:
        log({"type": "infra_diagnostic", **record})
    first = decided[0][1] if decided else None
    row = {**benchmark.row(config, task, episode, first), "worker": f"{socket.gethostname()}:{os.getpid()}",
           "infra_diagnostics": dict(Counter(d["phase"] for d in diagnostics))}
    log(row)
    if keep:
        keep(decided, final, row)
    return row


def robustness(config):
    """The run's ``harness.robust.Robustness`` (OpenWebRL A.1) from its flags (``--start-retries``,
    ``--start-backoff``, ``--startup-timeout``, ``--action-timeout``, ``--screenshot-timeout``,
    ``--host-blocklist``)."""
    from harness.robust import Robustness

    return Robustness(start_retries=config.start_retries, backoff_s=config.start_backoff,
                      startup_s=config.startup_timeout, action_s=config.action_timeout,
                      screenshot_s=config.screenshot_timeout, blocklist=config.host_blocklist).check()


def configure_harness(harness, config) -> None:
    """The run's OpenWebRL A.1 settings on a ``BrowserHarness`` (``robustness``) and
    its A.2 element probes (on for agents whose feedback reads them: ``--element-feedback``)."""
    if hasattr(harness, "robustness"):
        harness.robustness = robustness(config)
        harness.element_probes = bool(getattr(config, "element_feedback", False))


# -- models -------------------------------------------------------------------------------------

def model_config(name: str, given: dict, temperature: float | None = None, llm_class=None):
    """An ``llm.LLMConfig`` for a model named on the command line (a folder, 'embedded', or a
    name at ``given['base_url']``) and the settings ``given`` for it; ``temperature`` is the
    default when none is given; ``llm_class``: the ``LLMConfig`` subclass whose defaults apply
    (the flags' class: MAG's policy has 1,024 tokens)."""
    from llm import LLMConfig

    cfg = replace((llm_class or LLMConfig)(), **given)
    if "model" not in given:
        cfg = replace(cfg, model=None if name == "embedded" else name)
    if temperature is not None and "temperature" not in given:
        cfg = replace(cfg, temperature=temperature)
    return cfg.validate()


def prm_llm_config(config):
    """The PRM's ``LLMConfig``: as ``model_config``, and when it generates judgments (behind an
    endpoint, or a local PRM in ``generate`` mode) ``max_tokens`` >= 1024
    (``prm.judge.GENERATE_MAX_TOKENS``: a full judgment fits) unless given."""
    from prm.judge import generate_max_tokens

    cfg = model_config(config.prm, config.prm_llm)
    mode = prm_judge_mode(config, cfg.is_local)
    return generate_max_tokens(cfg, mode, given="max_tokens" in config.prm_llm)


def policy_llm_config(config, llm_class=None):
    """The policy's ``LLMConfig``: N samples at temperature 1.0 when guided, one greedy sample
    for the baseline, unless a temperature is given; the other defaults ``llm_class``'s (an agent
    kind's ``policy_llm``: MAG's 1,024 tokens)."""
    return model_config(config.policy, config.policy_llm, 1.0 if config.guided else 0.0, llm_class)


def prm_judge_mode(config, local: bool) -> str:
    """The PRM's verdict mode: ``auto`` is score-both for a local model, generate at an endpoint
    (an endpoint only generates: another mode there is an error)."""
    mode = config.prm_judge_mode
    if mode == "auto":
        return "score-both" if local else "generate"
    if not local and mode != "generate":
        raise ValueError(f"--prm-judge-mode {mode} needs a local PRM (a folder or 'embedded'); "
                         "an endpoint only generates")
    return mode


def judge_factory(config):
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


def load_models(benchmark, config):
    """(propose, judge_for); models load here, after the setup checks."""
    kind = benchmark.agent
    return kind.policy(config, policy_llm_config(config, kind.policy_llm)), judge_factory(config)


def model_settings(benchmark, config) -> dict:
    """What ``run.json`` records of the models beside the resume settings: the token limits in
    force (given or defaulted), the PRM's verdict mode (``prm_judge_mode_used``: score-both or
    generate), where a local PRM loads (``auto`` resolved on this machine), and the browser's
    OpenWebRL settings (``browser``: retries, time-outs, blocklist; ``element_feedback``)."""
    c = config
    policy = policy_llm_config(c, benchmark.agent.policy_llm)
    out = {"policy_max_tokens": policy.max_tokens, "policy_temperature": policy.temperature,
           "browser": asdict(robustness(c)), "element_feedback": bool(getattr(c, "element_feedback", False))}
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
