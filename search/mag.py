"""PRM-guided knockout search on MAG: WebArena tasks from screenshots, with a guide per step.

    python -m search.mag --prm runs/demo/prm/cpu-demo --policy gpt-4o \\
        --policy-base-url https://api.openai.com/v1 --task-ids 27 44 --gold-guides gold.jsonl --out runs/mag/prm
    python -m search.mag --prm none --policy gpt-4o --policy-base-url ... \\
        --gold-guides gold.jsonl --out runs/mag/base                  # the unguided baseline
    python -m search.mag ... --out runs/mag/prm --baseline runs/mag/base     # both rows in table.md

Models as in ``search.webarena``: a local transformers folder, ``embedded``, or a name served at
``--prm-base-url`` / ``--policy-base-url`` (the other ``--prm-*`` / ``--policy-*`` flags are
``llm.client.LLMConfig``'s); ``--prm none`` runs one greedy policy output per step, no judge.
``--grounding som`` (default) asks for a menu id, ``coord`` for a pixel pair. ``--screenshot auto``
attaches the marked screenshot when the policy is an endpoint (a vision model) and not for a local
model (text only); ``on``/``off`` force it.

``--demo`` runs one built-in task instead, on a small shop served on 127.0.0.1
(``search.demo_site``, gold guides included): the whole harness without WebArena, e.g. to check
that a policy endpoint writes the contract (``make mag-demo`` runs it with the embedded model).

Tasks: WebArena task ids (``--task-ids``; the configs come from BrowserGym's WebArena package,
``webarena/test.raw.json``, 812 tasks); without ``--task-ids`` the ids of the gold-guide file. The
gold-guide format is in ``search.mag_metrics`` (JSONL, ``{"task_id": 27, "steps": [{"guide": ...}]}``);
without gold guides the run reports success and OFCR only. Before any model loads or browser
starts, the ``WA_*`` variables and the tasks' sites are checked (exit 2 naming what is missing).

Output in ``--out``: ``tasks/<task_id>.jsonl`` (one line per step: the N outputs, the bracket,
the executed action and guide, the compliance reason, the browser's error, timings; then one
``result`` line with the task's metrics), ``summary.json`` (MAG Table 1 columns: SR, OFCR, BLEU-1,
BLEU-2, ROUGE-1, ROUGE-L, G, GGS, tax; OFCR over all sampled outputs as ``OFCR_outputs``;
terminations; every task run counts in SR and the other columns, an episode that ended in an
environment failure as not solved, scored on the steps it made; the failures are listed beside
them as ``env_failures`` and ``env_failed_tasks``; ``sites`` and ``macro.success_rate`` give
success per site and its macro-average; ``totals`` the outputs screened out before the bracket
and the PRM's unparsed and truncated judgments),
``table.md`` (the same as a Markdown row, with ``--baseline``'s row above it), ``versions.json``,
``run.json`` (the settings), and with ``--save-screenshots`` ``shots/<task_id>/<step>.png``.
``--resume`` skips the tasks the agent finished (environment failures run again), refuses a
folder whose ``run.json`` has other settings, and rescores every task from its stored guides with
the current ``--gold-guides`` (a gold file added later fills the guide columns).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
from dataclasses import asdict
from pathlib import Path

from search.mag_metrics import load_gold_guides, score_task, summarize
from search.tournament import prm_format
from search.webarena import (SetupError, _model_config, env_failure_list, preflight, prm_config, run_tasks,
                             site_key, site_success, start_run)

RUN_SETTINGS = ("prm", "policy", "grounding", "n", "max_steps", "seed", "both_orders", "demo")
TABLE_COLUMNS = ("SR", "OFCR", "bleu1", "bleu2", "rouge1", "rougeL", "G", "GGS", "tax")
TABLE_NAMES = ("SR", "OFCR", "BLEU-1", "BLEU-2", "ROUGE-1", "ROUGE-L", "G", "GGS", "Tax")


def config_path() -> Path:
    """WebArena's task file inside the ``webarena`` package BrowserGym installs (found without
    importing it)."""
    spec = importlib.util.find_spec("webarena")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError("webarena (libwebarena) is not installed (pip install --no-deps -r requirements/browsergym.txt)")
    return Path(list(spec.submodule_search_locations)[0]) / "test.raw.json"


def load_task_configs(task_ids) -> list[dict]:
    """WebArena task configs for ``task_ids`` (URL placeholders left as they are), in the order asked."""
    if not task_ids:
        raise SetupError("no tasks: give --task-ids, or --gold-guides whose task ids are run")
    by_id = {c["task_id"]: c for c in json.loads(config_path().read_text())}
    wanted = [int(t) for t in task_ids]
    unknown = sorted(set(wanted) - set(by_id))
    if unknown:
        raise SetupError(f"no WebArena task with id {unknown} (ids are 0-811)")
    return [by_id[t] for t in dict.fromkeys(wanted)]


def summarize_run(results: list[dict], gold: dict | None) -> dict:
    """MAG Table 1 over every task run (each scored from its stored guides and compliance reasons
    against ``gold``; an environment failure as not solved), env failures listed beside."""
    from search.loop import sum_counts

    evaluated = [r for r in results if r["evaluated"]]
    scores = [score_task(r["task_id"], (r["reward"] or 0.0) if r["evaluated"] else 0.0, r.get("reasons") or [],
                         r.get("guides") or [], gold.get(str(r["task_id"])) if gold is not None else None)
              for r in results]
    out = summarize(scores)
    outputs = sum(r.get("n_outputs", 0) for r in results)
    out["OFCR_outputs"] = sum(r.get("n_outputs_compliant", 0) for r in results) / outputs if outputs else None
    out["tasks"] = len(results)
    out["env_failures"] = len(results) - len(evaluated)
    out["env_failed_tasks"] = env_failure_list(results)
    out["sites"], macro = site_success([{**r, "success": bool(r["evaluated"] and (r["reward"] or 0) > 0)}
                                        for r in results])
    out["macro"] = {"success_rate": macro}
    out["totals"] = sum_counts([r.get("totals") or {} for r in results])
    out["terminations"] = {}
    for r in results:
        out["terminations"][r["termination"]] = out["terminations"].get(r["termination"], 0) + 1
    out["gold_file"] = gold is not None
    return out


def table(rows: list[tuple[str, dict]]) -> str:
    """Markdown table in the MAG paper's Table 1 layout (percent, one decimal; '-' when absent)."""
    head = "| run | " + " | ".join(TABLE_NAMES) + " |"
    lines = [head, "|" + "---|" * (len(TABLE_NAMES) + 1)]
    for name, s in rows:
        cells = [f"{100 * s[k]:.1f}" if s.get(k) is not None else "-" for k in TABLE_COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    from search.mag_loop import MAX_STEPS
    from search.tournament import add_prm_format_args
    from llm import LLMConfig

    ap = argparse.ArgumentParser(prog="python -m search.mag", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prm", required=True, help="PRM: a folder, 'embedded', a model name at --prm-base-url, or 'none'")
    ap.add_argument("--policy", required=True, help="policy: a folder, 'embedded', or a model name at --policy-base-url")
    ap.add_argument("--grounding", choices=("som", "coord"), default="som")
    ap.add_argument("--n", type=int, default=5, help="outputs per step (paper: 5)")
    ap.add_argument("--task-ids", nargs="*", type=int, help="WebArena task ids (default: those of --gold-guides)")
    ap.add_argument("--gold-guides", help="gold-guide JSONL (see search.mag_metrics)")
    ap.add_argument("--max-steps", type=int, default=MAX_STEPS)
    ap.add_argument("--screenshot", choices=("auto", "on", "off"), default="auto",
                    help="attach the screenshot to the policy prompt (auto: only for an endpoint policy)")
    ap.add_argument("--both-orders", action="store_true", help="judge every match in both orders")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/mag", help="output folder")
    ap.add_argument("--resume", action="store_true", help="skip tasks already finished in --out")
    ap.add_argument("--baseline", help="a baseline run's folder: table.md shows its row too")
    ap.add_argument("--save-screenshots", action="store_true", help="keep every marked screenshot")
    ap.add_argument("--demo", action="store_true",
                    help="run the built-in demo task (a small shop on 127.0.0.1, gold guides included) instead "
                         "of WebArena: no sites needed")
    add_prm_format_args(ap)
    LLMConfig.add_args(ap, prefix="prm-")
    LLMConfig.add_args(ap, prefix="policy-")
    return ap


def load_models(args):
    """(propose, judge_for); models load here, after the preflight."""
    from prm.judge import make_judge
    from search.mag_loop import MagPolicy
    from search.tournament import prm_format, prm_pair_judge, prm_state

    guided = args.prm.lower() != "none"
    cfg = _model_config(args, "policy-", args.policy, 1.0 if guided else 0.0)
    screenshot = args.screenshot == "on" or (args.screenshot == "auto" and not cfg.is_local)
    policy = MagPolicy(cfg, grounding=args.grounding, screenshot=screenshot)
    judge_for = None
    if guided:
        judge = make_judge(prm_config(args))
        fmt = prm_format(args)

        def judge_for(obs, history):
            return prm_pair_judge(judge, prm_state(obs, history), fmt=fmt)
    return policy.propose, judge_for


def episode_row(task_id, site: str, intent: str, episode, gold: dict | None) -> dict:
    """The result line of one episode: termination, success, answer and its MAG scores."""
    reasons = [r for s in episode.steps for r in s.output_reasons]
    row = {"type": "result", "task_id": task_id, "site": site, "intent": intent, **episode.to_dict(),
           "guides": episode.guides, "reasons": episode.reasons,
           "n_steps": len(episode.steps), "n_outputs": len(reasons),
           "n_outputs_compliant": sum(r is None for r in reasons)}
    if episode.evaluated:
        gold_guides = gold.get(str(task_id)) if gold is not None else None
        row["score"] = asdict(score_task(task_id, episode.reward or 0.0, episode.reasons, episode.guides,
                                         gold_guides))
    return row


def webarena_harness(urls: dict):
    """A harness factory for WebArena tasks (``browsergym.webarena``: WebArena's own login, start
    pages and evaluators), confined to the configured sites."""
    from search.env import BrowserHarness, host_of, prepare_webarena_imports
    from search.som import MAG_ACTION_SUBSETS, VIEWPORT

    prepare_webarena_imports()
    from browsergym.webarena.task import GenericWebArenaTask   # after the stubs

    def make(config):
        return BrowserHarness(GenericWebArenaTask, {"task_id": config["task_id"]}, viewport=VIEWPORT,
                              action_subsets=MAG_ACTION_SUBSETS, allowed_hosts={host_of(u) for u in urls.values()})
    return make


def run_task(config: dict, make_harness, propose, judge_for, args, log, gold, shots: Path | None) -> dict:
    """One MAG task: one episode in ``make_harness(config)``, the JSONL lines, the result row."""
    from search.mag_loop import run_mag_episode

    def on_step(step, obs):
        log({"type": "step", **asdict(step)})
        if shots is not None:
            (shots / f"{step.step:02d}.png").write_bytes(obs.screenshot_png)

    with make_harness(config) as harness:
        episode = run_mag_episode(harness, propose, judge_for, n=args.n, grounding=args.grounding,
                                  max_steps=args.max_steps, seed=args.seed, both_orders=args.both_orders,
                                  on_step=on_step)
    row = episode_row(config["task_id"], site_key(config), config["intent"], episode, gold)
    log(row)
    return row


def gold_task_ids(gold: dict) -> list[int]:
    """The gold file's task ids as WebArena ids (integers), in numeric order."""
    bad = [t for t in gold if not str(t).isdigit()]
    if bad:
        raise SetupError(f"gold-guide task ids must be WebArena task ids (integers), got {bad[:3]}")
    return sorted(int(t) for t in gold)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.n < 1 or args.max_steps < 1:
        ap.error("--n and --max-steps must be at least 1")
    try:
        prm_format(args)
    except ValueError as e:
        ap.error(str(e))
    out = Path(args.out)
    settings = {k: getattr(args, k) for k in RUN_SETTINGS}
    try:
        gold = load_gold_guides(args.gold_guides)
        if args.demo:
            from search.demo_site import GOLD_GUIDES, demo_config

            if args.task_ids:
                raise SetupError("--demo runs the demo task only; drop --task-ids")
            gold = {**GOLD_GUIDES, **(gold or {})}          # a given file may add or replace the demo's
            configs, urls = [demo_config()], None
        else:
            configs = load_task_configs(args.task_ids or (gold_task_ids(gold) if gold else None))
            urls = preflight(configs)
        if args.resume and (out / "run.json").exists():
            before = json.loads((out / "run.json").read_text())
            if changed := sorted(k for k in RUN_SETTINGS if before.get(k, ap.get_default(k)) != settings[k]):
                raise SetupError(f"--resume in {out}: settings differ from the earlier run ({', '.join(changed)}); "
                                 "use another --out")
    except (SetupError, ValueError, OSError) as e:
        print(f"search.mag: {e}", file=sys.stderr)
        return 2
    todo, results = start_run(out, configs, "task_id", args.resume)
    (out / "run.json").write_text(json.dumps(settings, indent=2))
    if todo:
        propose, judge_for = load_models(args)
        with contextlib.ExitStack() as stack:
            if args.demo:
                from search.demo_site import Shop, demo_harness
                from search.som import MAG_ACTION_SUBSETS, VIEWPORT

                make_harness = demo_harness(stack.enter_context(Shop()), viewport=VIEWPORT,
                                            action_subsets=MAG_ACTION_SUBSETS)
            else:
                make_harness = webarena_harness(urls)

            def run_one(config, log):
                shots = out / "shots" / str(config["task_id"]) if args.save_screenshots else None
                if shots is not None:
                    shots.mkdir(parents=True, exist_ok=True)
                return run_task(config, make_harness, propose, judge_for, args, log, gold, shots)
            results += run_tasks(out, [(c["task_id"], c) for c in todo], run_one)
    write_summary(out, results, gold, args)
    return 0


def write_summary(out: Path, results: list[dict], gold: dict | None, args) -> dict:
    summary = summarize_run(results, gold)
    summary.update(prm=args.prm, policy=args.policy, n=args.n, grounding=args.grounding)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    name = f"{args.policy} + {'no PRM' if args.prm.lower() == 'none' else args.prm}"
    rows = [(name, summary)]
    if args.baseline:
        base = json.loads((Path(args.baseline) / "summary.json").read_text())
        rows.insert(0, (f"{base.get('policy')} + {'no PRM' if str(base.get('prm')).lower() == 'none' else base.get('prm')}", base))
    (out / "table.md").write_text(table(rows))
    print(table(rows), file=sys.stderr)
    return summary


if __name__ == "__main__":
    sys.exit(main())
