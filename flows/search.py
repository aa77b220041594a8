"""The ``search-webarena`` and ``search-mag`` Prefect flows: knockout best-of-N search with a PRM
on WebArena-Lite, and on MAG (screenshots, Set-of-Mark menu, a guide per step).

    python -m flows.search --prm runs/demo/prm/cpu-demo --policy gpt-4o \\
        --policy-base-url https://api.openai.com/v1 --sites shopping --out runs/wa/prm
    python -m flows.search mag --prm runs/demo/prm/cpu-demo --policy gpt-4o \\
        --policy-base-url https://api.openai.com/v1 --gold-guides gold.jsonl --out runs/mag/prm

The flows run ``python -m search.webarena`` / ``python -m search.mag`` (all of their flags pass
through); the logic lives in :mod:`search`. A missing ``WA_*`` variable or an unreachable site
fails the task at once with the message naming it (no retry: nothing would change); the runs are
resumable, so a retry of a failed run only finishes the remaining tasks.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from prefect import flow, task


@task(name="search-run")
def search_task(argv: list[str], module: str = "search.webarena") -> dict:
    """Run ``python -m <module>`` with ``argv``; its summary."""
    cli = importlib.import_module(module)
    args = cli.build_parser().parse_args(argv)
    rc = cli.main(argv)
    if rc == 2:
        raise RuntimeError(f"{module} setup failed (see the message above: tasks, flags, WA_* variables, sites "
                           "or a resume with other settings)")
    if rc != 0:
        raise RuntimeError(f"{module} exited {rc}")
    return json.loads((Path(args.out) / "summary.json").read_text())


@flow(name="search-webarena", log_prints=True)
def search_webarena_flow(prm: str, policy: str, out: str = "runs/webarena", n: int = 5,
                         task_ids: list[int] | None = None, sites: list[str] | None = None,
                         max_steps: int = 30, prm_base_url: str | None = None,
                         policy_base_url: str | None = None, baseline: str | None = None,
                         resume: bool = True, demo: bool = False, extra_args: list[str] | None = None) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on WebArena-Lite (``demo``: on the
    built-in demo shop); returns the summary."""
    argv = to_argv(prm=prm, policy=policy, out=out, n=n, task_ids=task_ids, sites=sites, max_steps=max_steps,
                   prm_base_url=prm_base_url, policy_base_url=policy_base_url, baseline=baseline,
                   resume=resume, demo=demo) + list(extra_args or [])
    summary = search_task(argv)
    print(f"macro success {summary['macro_success']} over {summary['tasks']} tasks -> {out}")
    return summary


@flow(name="search-mag", log_prints=True)
def search_mag_flow(prm: str, policy: str, out: str = "runs/mag", n: int = 5, task_ids: list[int] | None = None,
                    gold_guides: str | None = None, grounding: str = "som", max_steps: int = 25,
                    prm_base_url: str | None = None, policy_base_url: str | None = None,
                    baseline: str | None = None, resume: bool = True, demo: bool = False,
                    extra_args: list[str] | None = None) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on MAG (``demo``: on the built-in demo
    shop); returns the Table-1 summary."""
    argv = to_argv(prm=prm, policy=policy, out=out, n=n, task_ids=task_ids, gold_guides=gold_guides,
                   grounding=grounding, max_steps=max_steps, prm_base_url=prm_base_url,
                   policy_base_url=policy_base_url, baseline=baseline, resume=resume, demo=demo) + list(extra_args or [])
    summary = search_task(argv, module="search.mag")
    print(f"SR {summary['SR']}, OFCR {summary['OFCR']}, GGS {summary.get('GGS')} over {summary['tasks']} tasks -> {out}")
    return summary


def to_argv(**params) -> list[str]:
    """Flow parameters as ``search.webarena`` / ``search.mag`` flags (pure)."""
    argv: list[str] = []
    for key, value in params.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mag"]:
        from search.mag import build_parser

        argv = argv[1:]
        args = build_parser().parse_args(argv)     # bad flags fail here, before a flow run starts
        # the full command line goes through as well: argparse keeps the last value of a repeated flag
        search_mag_flow(prm=args.prm, policy=args.policy, out=args.out, n=args.n, task_ids=args.task_ids,
                        gold_guides=args.gold_guides, grounding=args.grounding, max_steps=args.max_steps,
                        resume=args.resume, demo=args.demo, extra_args=argv)
        return 0
    from search.webarena import build_parser

    args = build_parser().parse_args(argv)
    search_webarena_flow(prm=args.prm, policy=args.policy, out=args.out, n=args.n, task_ids=args.task_ids,
                         sites=args.sites, max_steps=args.max_steps, resume=args.resume, demo=args.demo,
                         extra_args=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
