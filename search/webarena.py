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

Output in ``--out``: ``tasks/<task_id>.jsonl`` (one line per step: candidates, bracket, chosen
action, feedback, errors, timings, the candidates screened out before the bracket and the
judgments without a verdict, unparsed or truncated; then one ``result`` line with their
``totals``), ``summary.json`` and ``versions.json``. ``summary.json``: success per site over
every task run and the macro-average over sites (``macro_success``, ``macro.success_rate``); an
episode that ended in an environment failure (``site_unreachable``, ``env_error``,
``policy_error``) counts as a task not solved, and the failures are listed beside the rates
(``env_failures`` per site and overall, ``env_failed_tasks``), never dropped from the
denominator; ``totals`` sums the step counts over the run. ``--resume`` skips tasks the agent
finished (evaluated); environment failures run again.
The PRM's prompt holds the task's own start URL (``search.env.task_start_url``).
The PRM behind an endpoint gets ``--prm-max-tokens`` 1024 unless given (a full judgment fits).
Tasks with ``require_reset`` are preceded by a full reset of the sites when ``WA_FULL_RESET`` is
set (else they run as they are, flagged ``reset_skipped``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

WA_VARS = {"shopping": "WA_SHOPPING", "shopping_admin": "WA_SHOPPING_ADMIN", "reddit": "WA_REDDIT",
           "gitlab": "WA_GITLAB", "wikipedia": "WA_WIKIPEDIA", "map": "WA_MAP", "homepage": "WA_HOMEPAGE"}
SITES = tuple(k for k in WA_VARS if k != "homepage")
CONFIG_FILE = "test_webarena_lite.raw.json"


class SetupError(RuntimeError):
    """Something the run needs is missing; the message says what (exit code 2)."""


def config_path() -> Path:
    """The WebArena-Lite task file inside ``browsergym-webarenalite``, found without importing the
    package (its ``__init__`` downloads NLTK data and registers every task)."""
    spec = importlib.util.find_spec("browsergym.webarenalite")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError("browsergym-webarenalite is not installed (pip install --no-deps -r requirements/browsergym.txt)")
    return Path(list(spec.submodule_search_locations)[0]) / CONFIG_FILE


def load_task_configs(task_ids=None, sites=None) -> list[dict]:
    """WebArena-Lite task configs (URL placeholders left as they are), filtered by WebArena task id
    (``old_task_id``, as BrowserGym's ``webarenalite.<id>``) and by site (every site of the task
    must be selected)."""
    configs = json.loads(config_path().read_text())
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


def site_key(config: dict) -> str:
    return config["sites"][0] if len(config["sites"]) == 1 else "multi"


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
    urls = {site: environ[var].rstrip("/") for site, var in WA_VARS.items()}
    if check_reachable:
        needed = sorted({s for c in configs for s in c["sites"]})
        down = [(s, urls[s], why) for s in needed if (why := _reachable(urls[s], timeout))]
        if down:
            raise SetupError("site(s) not reachable: " + "; ".join(f"{s} at {u} ({w})" for s, u, w in down))
    return urls


def site_success(results: list[dict]) -> tuple[dict, float | None]:
    """(per site: tasks, evaluated, success, env_failures, success_rate; the macro-average of the
    sites' rates). A rate counts every task run: an environment failure is a task not solved."""
    per: dict[str, dict] = {}
    for r in results:
        s = per.setdefault(r["site"], {"tasks": 0, "evaluated": 0, "success": 0, "env_failures": 0})
        s["tasks"] += 1
        if r["evaluated"]:
            s["evaluated"] += 1
            s["success"] += int(bool(r["success"]))
        else:
            s["env_failures"] += 1
    for s in per.values():
        s["success_rate"] = s["success"] / s["tasks"]
    rates = [s["success_rate"] for s in per.values()]
    return per, (sum(rates) / len(rates) if rates else None)


def env_failure_list(results: list[dict]) -> list[dict]:
    """The tasks that ended in an environment failure, with why."""
    return [{"task_id": r.get("task_id"), "site": r.get("site"), "termination": r["termination"],
             "error": str(r.get("error") or "")[:300]} for r in results if not r["evaluated"]]


def summarize(results: list[dict], baseline: dict | None = None) -> dict:
    """Success per site and macro-average over every task run; environment failures listed beside
    the rates (per site and overall), not dropped from them; step counts summed (``totals``)."""
    from search.loop import sum_counts

    per, macro = site_success(results)
    out = {"sites": per, "macro_success": macro, "macro": {"success_rate": macro},
           "tasks": len(results), "env_failures": sum(not r["evaluated"] for r in results),
           "env_failed_tasks": env_failure_list(results), "terminations": {},
           "totals": sum_counts([r.get("totals") or {} for r in results])}
    for r in results:
        out["terminations"][r["termination"]] = out["terminations"].get(r["termination"], 0) + 1
    if baseline:
        out["baseline_macro_success"] = baseline.get("macro_success")
        if out["macro_success"] is not None and baseline.get("macro_success") is not None:
            out["macro_difference"] = out["macro_success"] - baseline["macro_success"]
        out["site_difference"] = {
            k: v["success_rate"] - baseline["sites"][k]["success_rate"] for k, v in per.items()
            if k in baseline.get("sites", {}) and v["success_rate"] is not None
            and baseline["sites"][k].get("success_rate") is not None}
    return out


def run_tasks(out: Path, todo: list[tuple], run_one) -> list[dict]:
    """``run_one(config, log)`` for each ``(task_id, config)``: ``log(row)`` appends a flushed line
    to ``out/tasks/<task_id>.jsonl`` (a crash keeps the finished lines); progress on stderr.
    Returns the result rows."""
    results = []
    for i, (task_id, config) in enumerate(todo, 1):
        t = time.perf_counter()
        with (out / "tasks" / f"{task_id}.jsonl").open("w") as f:
            def log(row):
                f.write(json.dumps(row, default=str) + "\n")
                f.flush()
            row = run_one(config, log)
        results.append(row)
        print(f"[{i}/{len(todo)}] task {task_id} ({row['site']}): {row['termination']}, reward {row['reward']}, "
              f"{row['n_steps']} steps, {time.perf_counter() - t:.0f}s", file=sys.stderr)
    return results


def start_run(out: Path, configs: list[dict], key: str, resume: bool) -> tuple[list[dict], list[dict]]:
    """Create ``out/tasks``, write ``versions.json``; with ``resume``, the finished tasks' result
    rows are kept. Returns (configs still to run, result rows already there)."""
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    (out / "versions.json").write_text(json.dumps(_versions(), indent=2))
    done = finished_tasks(out) if resume else {}
    todo = [c for c in configs if c[key] not in done]
    print(f"{len(configs)} tasks, {len(done)} already done, {len(todo)} to run", file=sys.stderr)
    return todo, [done[c[key]] for c in configs if c[key] in done]


def finished_tasks(out: Path) -> dict:
    """task id -> result line of the tasks the agent finished (resume): their JSONL in
    ``out/tasks`` ends with an evaluated result. Environment failures run again."""
    done = {}
    for f in (out / "tasks").glob("*.jsonl"):
        lines = [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
        if lines and lines[-1].get("type") == "result" and lines[-1].get("evaluated"):
            done[lines[-1]["task_id"]] = lines[-1]
    return done


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for p in ("surfprm", "browsergym-core", "browsergym-webarenalite", "playwright", "transformers", "torch"):
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


def build_parser() -> argparse.ArgumentParser:
    from search.tournament import add_prm_format_args
    from llm import LLMConfig

    ap = argparse.ArgumentParser(prog="python -m search.webarena", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prm", required=True, help="PRM: a folder, 'embedded', a model name at --prm-base-url, or 'none'")
    ap.add_argument("--policy", required=True, help="policy: a folder, 'embedded', or a model name at --policy-base-url")
    ap.add_argument("--n", type=int, default=5, help="candidates per step (paper: 5)")
    ap.add_argument("--task-ids", nargs="*", type=int, help="WebArena task ids (default: all 165 of WebArena-Lite)")
    ap.add_argument("--sites", nargs="*", help=f"only tasks on these sites: {', '.join(SITES)}")
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--max-format-errors", type=int, default=3)
    ap.add_argument("--both-orders", action="store_true", help="judge every match in both orders")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/webarena", help="output folder")
    ap.add_argument("--resume", action="store_true", help="skip tasks already finished in --out")
    ap.add_argument("--baseline", help="a baseline run's folder: the summary adds the differences")
    ap.add_argument("--demo", action="store_true",
                    help="run the built-in demo task (a small shop on 127.0.0.1) instead of WebArena-Lite: no sites needed")
    add_prm_format_args(ap)
    LLMConfig.add_args(ap, prefix="prm-")
    LLMConfig.add_args(ap, prefix="policy-")
    return ap


def _model_config(args, prefix: str, name: str, temperature: float | None = None):
    from llm import LLMConfig

    cfg = LLMConfig.from_args(args, prefix=prefix)
    if getattr(args, prefix.replace("-", "_") + "model") is None:
        cfg = replace(cfg, model=None if name == "embedded" else name)
    if temperature is not None and getattr(args, prefix.replace("-", "_") + "temperature") is None:
        cfg = replace(cfg, temperature=temperature)
    return cfg


def _load_models(args):
    """(propose, judge_for); models load here, after the preflight."""
    from prm.judge import make_judge
    from search.agent import Policy
    from search.tournament import prm_format, prm_pair_judge, prm_state

    guided = args.prm.lower() != "none"
    policy = Policy(_model_config(args, "policy-", args.policy, 1.0 if guided else 0.0))
    judge_for = None
    if guided:
        judge = make_judge(prm_config(args))
        fmt = prm_format(args)

        def judge_for(obs, history):
            return prm_pair_judge(judge, prm_state(obs, history), fmt=fmt)
    return policy.propose, judge_for


def prm_config(args):
    """The PRM's ``LLMConfig``: as ``_model_config``, and behind an endpoint ``max_tokens`` >= 1024
    unless ``--prm-max-tokens`` (or ``--prm-llm-config``) sets it (``prm.evaluate.judge_config``)."""
    from prm.evaluate import judge_config

    return judge_config(args, "prm-", _model_config(args, "prm-", args.prm))


def webarena_lite_harness(urls: dict):
    """A harness factory (``config -> BrowserHarness``) for WebArena-Lite tasks, confined to the
    configured sites."""
    from search.env import BrowserHarness, host_of, prepare_webarena_imports

    prepare_webarena_imports()
    from browsergym.webarenalite.task import WebArenaLiteTask   # after the stubs

    def make(config):
        return BrowserHarness(WebArenaLiteTask, {"task_id": config["old_task_id"]},
                              allowed_hosts={host_of(u) for u in urls.values()})
    return make


def run_task(config: dict, make_harness, propose, judge_for, args, log) -> dict:
    """One task: optional reset, one episode in ``make_harness(config)``, the JSONL lines, the result row."""
    from search.loop import run_episode

    task_id = config["old_task_id"]
    extra = {}
    if config.get("require_reset"):
        if os.environ.get("WA_FULL_RESET"):
            from browsergym.webarena.instance import WebArenaInstance

            WebArenaInstance().full_reset()
        else:
            extra["reset_skipped"] = True
    with make_harness(config) as harness:
        result = run_episode(harness, propose, judge_for, n=args.n, max_steps=args.max_steps,
                             seed=args.seed, max_format_errors=args.max_format_errors,
                             both_orders=args.both_orders, on_step=lambda s: log({"type": "step", **_step(s)}))
    row = {"type": "result", "task_id": task_id, "site": site_key(config), "intent": config["intent"],
           **{k: v for k, v in result.to_dict().items() if k != "steps"}, "n_steps": len(result.steps), **extra}
    log(row)
    return row


def _step(s) -> dict:
    from dataclasses import asdict

    return asdict(s)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        from search.tournament import prm_format

        prm_format(args)
    except ValueError as e:
        ap.error(str(e))
    try:
        if args.demo:
            from search.demo_site import demo_config

            if args.task_ids or args.sites:
                raise SetupError("--demo runs the demo task only; drop --task-ids/--sites")
            configs, urls = [demo_config()], None
        else:
            configs = load_task_configs(args.task_ids, args.sites)
            urls = preflight(configs)
    except SetupError as e:
        print(f"search.webarena: {e}", file=sys.stderr)
        return 2
    todo, results = start_run(out, configs, "old_task_id", args.resume)
    if todo:
        propose, judge_for = _load_models(args)
        with contextlib.ExitStack() as stack:
            if args.demo:
                from search.demo_site import Shop, demo_harness

                make_harness = demo_harness(stack.enter_context(Shop()))
            else:
                make_harness = webarena_lite_harness(urls)
            results += run_tasks(out, [(c["old_task_id"], c) for c in todo],
                                 lambda config, log: run_task(config, make_harness, propose, judge_for, args, log))
    baseline = json.loads((Path(args.baseline) / "summary.json").read_text()) if args.baseline else None
    summary = summarize(results, baseline)
    summary["prm"], summary["policy"], summary["n"] = args.prm, args.policy, args.n
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("macro_success", "tasks", "terminations")}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def score_answer(config: dict, answer: str | None, urls: dict, evaluators: str = "webarenalite") -> float:
    """Score a final answer offline with the benchmark's own evaluators (no browser): for tasks
    whose evaluation reads only the answer (``string_match`` with ``must_include``/``exact_match``).
    ``answer=None`` is an episode that never answered. ``urls``: site -> base URL (placeholders).
    ``evaluators``: ``webarenalite`` (BrowserGym's WebArena-Lite copy) or ``webarena`` (the
    original harness, for WebArena task configs as MAG uses them)."""
    import tempfile

    from search.env import prepare_webarena_imports

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
