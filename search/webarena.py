"""Knockout best-of-N search with a PRM on WebArena-Lite (BrowserGym), or the unguided baseline.

    python -m search.webarena --prm runs/demo/prm/cpu-demo --policy gpt-4o \
        --policy-base-url https://api.openai.com/v1 --n 5 --sites shopping gitlab --out runs/wa/prm
    python -m search.webarena --prm none --policy gpt-4o --policy-base-url ... --out runs/wa/base
    python -m search.webarena ... --out runs/wa/prm --baseline runs/wa/base     # adds the difference

A model is a local transformers folder, ``embedded`` (the small local SmolLM2), or a model name
served at ``--prm-base-url`` / ``--policy-base-url`` (any OpenAI-compatible endpoint); the other
``--prm-*`` / ``--policy-*`` flags are ``llm.client.LLMConfig``'s. ``--prm none`` runs the
baseline: one greedy policy sample per step, no judge.

``--demo`` runs one built-in task on a small shop served on 127.0.0.1 (``search.demo_site``)
instead: the whole loop without WebArena.

Before any model loads or browser starts, the run checks that BrowserGym's ``WA_*`` variables are
set (``WA_SHOPPING, WA_SHOPPING_ADMIN, WA_REDDIT, WA_GITLAB, WA_WIKIPEDIA, WA_MAP, WA_HOMEPAGE``)
and that the sites of the selected tasks answer; otherwise it names what is missing and exits 2.

The run itself is ``search.runner``'s (one loop, run folder, resume and summary for every
benchmark); this module plugs in WebArena-Lite's tasks, sites and harness, with the
BrowserGym-action agent (``search.agent.AXTreeAgent``).

Output in ``--out``: ``trajectories.parquet`` (the episodes as canonical trajectories, which
``python -m data.ingest --source canonical`` reads back: ``search.trajectories``),
``tasks/<task_id>.jsonl`` (one line per step: candidates, bracket, chosen action, feedback,
errors, timings, the candidates screened out before the bracket and the judgments without a
verdict, unparsed or truncated; then one ``result`` line with their
``totals``), ``summary.json``, ``versions.json`` and ``run.json`` (the settings, the AXTree budgets
``--policy-axtree-chars`` and ``--prm-axtree-chars``, both 12,000 by default, the models' token
limits and where a local PRM loaded). ``summary.json``: success per environment over every task
run and the macro-average over them (``macro.success_rate``); the environments
are the paper's five (Table 3: shopping, reddit, shopping_admin, gitlab, map), a multi-site task
counted under its first site other than Wikipedia (``environment_of``: 46, 21, 35, 32 and 31
of the 165 tasks, the denominators of Table 3's unguided rows, which the paper reports from
WebArbiter; its own guided rates fit 46 and 31 but not 21, 35 or 32, e.g. GitLab's 41.18% is
7/17, and the paper does not say which tasks they were computed on); ``per_environment`` always
holds them, and ``--site-groups multi`` makes ``sites`` and the macro one row per site with the
10 multi-site tasks apart (``multi``) instead; an
episode that ended in an environment failure (``site_unreachable``, ``env_error``,
``policy_error``) counts as a task not solved, and the failures are listed beside the rates
(``env_failures`` per site and overall, ``env_failed_tasks``), never dropped from the
denominator; ``totals`` sums the step counts over the run. ``--resume`` skips tasks the agent
finished (evaluated); environment failures run again; a folder whose ``run.json`` has other
settings is refused. Exit codes: 2 for a setup error (nothing ran), 1 when no task could run
(every task ended in an environment failure), else 0.
The PRM's prompt holds the task's own start URL (``harness.env.task_start_url``).
The PRM behind an endpoint, or a local one in ``--prm-judge-mode generate``, gets
``--prm-max-tokens`` 1024 unless given (a full judgment fits).
Tasks with ``require_reset`` are preceded by a full reset of the sites when ``WA_FULL_RESET`` is
set (else they run as they are, flagged ``reset_skipped``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from search.runner import (
    RESUME_SETTINGS,
    AXTreeSearch,
    Benchmark,
    SetupError,
    base_row,
    baseline_difference,
    run_summary,
    site_key,
    site_success,
)
from search.runner import build_parser as search_parser
from search.runner import main as run_cli

__all__ = ["WA_VARS", "SITES", "ENVIRONMENTS", "SetupError", "WEBARENA_LITE", "WebArenaSearch", "environment_of",
           "load_task_configs", "preflight", "score_answer", "site_key", "summarize_run", "webarena_harness", "main"]

WA_VARS = {"shopping": "WA_SHOPPING", "shopping_admin": "WA_SHOPPING_ADMIN", "reddit": "WA_REDDIT",
           "gitlab": "WA_GITLAB", "wikipedia": "WA_WIKIPEDIA", "map": "WA_MAP", "homepage": "WA_HOMEPAGE"}
SITES = tuple(k for k in WA_VARS if k != "homepage")
CONFIG_FILE = "test_webarena_lite.raw.json"


def webarena_lite_tasks_path() -> Path:
    """The WebArena-Lite task file inside ``browsergym-webarenalite``, found without importing the
    package (its ``__init__`` downloads NLTK data and registers every task)."""
    spec = importlib.util.find_spec("browsergym.webarenalite")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError("browsergym-webarenalite is not installed "
                         "(pip install --no-deps -r requirements/browsergym.txt)")
    return Path(list(spec.submodule_search_locations)[0]) / CONFIG_FILE


def load_task_configs(task_ids=None, sites=None) -> list[dict]:
    """WebArena-Lite task configs (URL placeholders left as they are), filtered by WebArena task id
    (``old_task_id``, as BrowserGym's ``webarenalite.<id>``) and by site (every site of the task
    must be selected)."""
    configs = json.loads(webarena_lite_tasks_path().read_text())
    if task_ids:
        wanted = {int(t) for t in task_ids}
        unknown = wanted - {c["old_task_id"] for c in configs}
        if unknown:
            raise SetupError(f"no WebArena-Lite task with id {sorted(unknown)}")
        configs = [c for c in configs if c["old_task_id"] in wanted]
    if sites:
        bad = sorted(set(sites) - set(SITES))
        if bad:
            raise SetupError(f"unknown site(s) {bad}; known: {list(SITES)}")
        configs = [c for c in configs if set(c["sites"]) <= set(sites)]
    return configs


def _reachable(url: str, timeout: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None             # it answered (a login page may say 401/403)
    except Exception as e:
        return f"{type(e).__name__}: {getattr(e, 'reason', e)}"


def preflight(configs: list[dict], environ=os.environ, timeout: float = 5.0, check_reachable: bool = True) -> dict:
    """Check variables and sites before anything heavy starts; raise ``SetupError`` naming what is
    missing. Returns site -> URL."""
    if not configs:
        raise SetupError("no WebArena-Lite task matches --task-ids/--sites")
    missing = [v for v in WA_VARS.values() if not environ.get(v)]
    if missing:
        raise SetupError("missing environment variable(s): " + ", ".join(missing) +
                         "\nBrowserGym needs all of " + ", ".join(WA_VARS.values()) +
                         " (the base URLs of your WebArena sites, e.g. WA_SHOPPING=http://host:7770)")
    urls = site_urls(environ)
    if check_reachable:
        needed = sorted({s for c in configs for s in c["sites"]})
        down = [(s, urls[s], why) for s in needed if (why := _reachable(urls[s], timeout))]
        if down:
            raise SetupError("site(s) not reachable: " + "; ".join(f"{s} at {u} ({w})" for s, u, w in down))
    return urls


def site_urls(environ=os.environ) -> dict:
    """site -> base URL, from BrowserGym's ``WA_*`` variables (``preflight`` checks they are set)."""
    return {site: environ[var].rstrip("/") for site, var in WA_VARS.items()}


def _env_order(name: str) -> tuple:
    return (ENVIRONMENTS.index(name) if name in ENVIRONMENTS else len(ENVIRONMENTS), name)


def webarena_harness(task_class: str, task_id_key: str, urls: dict, **harness_kwargs):
    """A harness factory (``task config -> BrowserHarness``) for a BrowserGym WebArena task class
    named by its import path (WebArena-Lite's, or WebArena's own for MAG), confined to the
    configured sites."""
    from harness.env import BrowserHarness, host_of, prepare_webarena_imports

    prepare_webarena_imports()
    module, name = task_class.rsplit(".", 1)
    task_entrypoint = getattr(importlib.import_module(module), name)     # after the stubs

    def make(config):
        return BrowserHarness(task_entrypoint, {"task_id": config[task_id_key]},
                              allowed_hosts={host_of(u) for u in urls.values()}, **harness_kwargs)
    return make


ENVIRONMENTS = ("shopping", "reddit", "shopping_admin", "gitlab", "map")    # the paper's Table 3
SITE_GROUPS = ("paper", "multi")


def environment_of(task: dict) -> str:
    """A WebArena-Lite task's environment among the paper's five: its first site other than
    Wikipedia (Wikipedia is never a task's only site in WebArena-Lite). Over the 165 tasks this gives
    the denominators of Table 3's unguided rows (reported from WebArbiter): 46 shopping, 21 reddit,
    35 shopping_admin, 32 gitlab, 31 map. The paper's guided rates do not all fit them (module docstring)."""
    sites = task["sites"]
    return next((s for s in sites if s != "wikipedia"), sites[0])


def _environment(row: dict) -> str:
    return row.get("environment") or row["site"]


def summarize_run(rows: list[dict], baseline: dict | None = None, site_groups: str = "paper") -> dict:
    """Success per environment and macro-average over every task run (``macro.success_rate``);
    ``site_groups`` 'paper' groups the ``sites`` table by the paper's five environments
    (``environment_of``), 'multi' by site with the multi-site tasks apart ('multi', as before);
    ``per_environment`` is always the five environments. Environment failures listed beside the
    rates (per site and overall), not dropped from them; step counts summed (``totals``); with a
    ``baseline`` summary, its rate (``baseline_success_rate``) and the differences (``difference``,
    ``site_difference``)."""
    if site_groups not in SITE_GROUPS:
        raise ValueError(f"site_groups must be one of {SITE_GROUPS}, not {site_groups!r}")
    out = run_summary(rows, _environment if site_groups == "paper" else (lambda r: r["site"]))
    per_environment, _ = site_success(rows, _environment)
    out.update(per_environment={e: per_environment[e] for e in sorted(per_environment, key=_env_order)},
               site_groups=site_groups)
    if baseline:
        out["baseline_success_rate"] = baseline_rate = (baseline.get("macro") or {}).get("success_rate")
        diff, out["site_difference"] = baseline_difference(out["sites"], out["macro"]["success_rate"],
                                                           baseline.get("sites", {}), baseline_rate)
        if diff is not None:
            out["difference"] = diff
    return out


@dataclass
class WebArenaSearch(AXTreeSearch):
    """A ``python -m search.webarena`` run."""

    out: str = field(default="runs/webarena", metadata={"help": "output folder"})
    task_ids: list[int] | None = field(default=None, metadata={
        "nargs": "*", "help": "WebArena task ids (default: all 165 of WebArena-Lite)"})
    sites: list[str] | None = field(default=None, metadata={
        "nargs": "*", "help": f"only tasks on these sites: {', '.join(SITES)}"})
    site_groups: str = field(default="paper", metadata={
        "choices": SITE_GROUPS,
        "help": "the summary's sites table and macro-average: paper = the paper's five environments (a "
                "multi-site task under its first site other than Wikipedia); multi = one row per site with "
                "the multi-site tasks apart. per_environment is always the five"})


def tasks(config: WebArenaSearch) -> list[dict]:
    """The selected WebArena-Lite tasks, after the preflight (or the demo task)."""
    if config.demo:
        from search.demo_site import demo_config

        if config.task_ids or config.sites:
            raise SetupError("--demo runs the demo task only; drop --task-ids/--sites")
        return [demo_config()]
    configs = load_task_configs(config.task_ids, config.sites)
    preflight(configs)
    return configs


def site_harnesses(config: WebArenaSearch):
    """WebArena-Lite's harnesses; a task with ``require_reset`` resets the sites first when
    ``WA_FULL_RESET`` is set."""
    make = webarena_harness("browsergym.webarenalite.task.WebArenaLiteTask", "old_task_id", site_urls())

    def make_after_reset(task):
        if task.get("require_reset") and os.environ.get("WA_FULL_RESET"):
            from browsergym.webarena.instance import WebArenaInstance

            WebArenaInstance().full_reset()
        return make(task)
    return make_after_reset


def row(config: WebArenaSearch, task: dict, episode, first_obs=None) -> dict:
    """The result line, with the task's environment (``environment_of``)."""
    out = base_row(task, episode, "old_task_id")
    out["environment"] = environment_of(task)
    if task.get("require_reset") and not os.environ.get("WA_FULL_RESET"):
        out["reset_skipped"] = True
    return out


def summarize(config: WebArenaSearch, rows: list[dict], baseline: dict | None) -> dict:
    return summarize_run(rows, baseline, config.site_groups)


def report(config: WebArenaSearch, summary: dict, baseline: dict | None) -> None:
    envs = ", ".join(f"{e} {v['success']}/{v['tasks']}" for e, v in summary["per_environment"].items())
    print(json.dumps({"success_rate": summary["macro"]["success_rate"], "tasks": summary["tasks"],
                      "terminations": summary["terminations"]}), file=sys.stderr)
    print(f"per environment: {envs or '-'}", file=sys.stderr)


def trajectory_site(task: dict, obs) -> str:
    from data.sites import site_of

    return site_of(obs.url)


WEBARENA_LITE = Benchmark(
    "search.webarena", WebArenaSearch, tasks, site_harnesses, task_key="old_task_id",
    resume_settings=RESUME_SETTINGS + ("max_format_errors", "policy_axtree_chars"), row=row,
    summarize=summarize, report=report, trajectory_site=trajectory_site)


def score_answer(config: dict, answer: str | None, urls: dict, evaluators: str = "webarenalite") -> float:
    """Score a final answer offline with the benchmark's own evaluators (no browser): for tasks
    whose evaluation reads only the answer (``string_match`` with ``must_include``/``exact_match``).
    ``answer=None`` is an episode that never answered. ``urls``: site -> base URL (placeholders).
    ``evaluators``: ``webarenalite`` (BrowserGym's WebArena-Lite copy) or ``webarena`` (the
    original harness, for WebArena task configs as MAG uses them)."""
    import tempfile

    from harness.env import prepare_webarena_imports

    if config["eval"]["eval_types"] != ["string_match"] or "fuzzy_match" in config["eval"]["reference_answers"]:
        raise ValueError(f"task {config.get('old_task_id', config['task_id'])} needs a browser or an LLM to be scored")
    prepare_webarena_imports()
    for site, var in WA_VARS.items():     # the evaluators assert these at import
        os.environ.setdefault(var, urls[site])
        os.environ.setdefault(var[3:], os.environ[var])
    if evaluators == "webarenalite":
        from browsergym.webarenalite.evaluators import evaluator_router
        from browsergym.webarenalite.helper_functions import PseudoPage
    elif evaluators == "webarena":
        from webarena.evaluation_harness.evaluators import evaluator_router
        from webarena.evaluation_harness.helper_functions import PseudoPage
    else:
        raise ValueError(f"unknown evaluators {evaluators!r}")
    from webarena.browser_env.actions import ActionTypes

    text = json.dumps(config)
    for site in SITES:
        text = text.replace(f"__{site.upper()}__", urls[site])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(text)
    try:
        last = ({"action_type": ActionTypes.STOP, "answer": answer} if answer is not None
                else {"action_type": ActionTypes.NONE, "answer": "whatever"})
        return float(evaluator_router(f.name)(trajectory=[{}, last], config_file=f.name,
                                              page=PseudoPage(None, urls[config["sites"][0]]), client=None))
    finally:
        os.unlink(f.name)


def build_parser():
    return search_parser(WEBARENA_LITE, doc=__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_cli(WEBARENA_LITE, argv, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
