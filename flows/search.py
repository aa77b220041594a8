"""The ``search-webarena`` Prefect flow: knockout best-of-N search with a PRM on WebArena-Lite.

    python -m flows.search --prm runs/demo/prm/cpu-demo --policy gpt-4o \\
        --policy-base-url https://api.openai.com/v1 --sites shopping --out runs/wa/prm

The flow runs ``python -m search.webarena`` (all of its flags pass through); the logic lives in
:mod:`search`. A missing ``WA_*`` variable or an unreachable site fails the task at once with the
message naming it (no retry: nothing would change); the run is resumable, so a retry of a failed
run only finishes the remaining tasks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from prefect import flow, task


@task(name="search-webarena-run")
def search_task(argv: list[str]) -> dict:
    from search.webarena import build_parser, main

    args = build_parser().parse_args(argv)
    rc = main(argv)
    if rc == 2:
        raise RuntimeError("search.webarena setup failed (see the message above: missing WA_* variables or sites)")
    if rc != 0:
        raise RuntimeError(f"search.webarena exited {rc}")
    return json.loads((Path(args.out) / "summary.json").read_text())


@flow(name="search-webarena", log_prints=True)
def search_webarena_flow(prm: str, policy: str, out: str = "runs/webarena", n: int = 5,
                         task_ids: list[int] | None = None, sites: list[str] | None = None,
                         max_steps: int = 30, prm_base_url: str | None = None,
                         policy_base_url: str | None = None, baseline: str | None = None,
                         resume: bool = True, extra_args: list[str] | None = None) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on WebArena-Lite; returns the summary."""
    argv = to_argv(prm=prm, policy=policy, out=out, n=n, task_ids=task_ids, sites=sites, max_steps=max_steps,
                   prm_base_url=prm_base_url, policy_base_url=policy_base_url, baseline=baseline,
                   resume=resume) + list(extra_args or [])
    summary = search_task(argv)
    print(f"macro success {summary['macro_success']} over {summary['tasks']} tasks -> {out}")
    return summary


def to_argv(**params) -> list[str]:
    """Flow parameters as ``search.webarena`` flags (pure)."""
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
    from search.webarena import build_parser

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)     # bad flags fail here, before a flow run starts
    # the full command line goes through as well: argparse keeps the last value of a repeated flag
    search_webarena_flow(prm=args.prm, policy=args.policy, out=args.out, n=args.n, task_ids=args.task_ids,
                         sites=args.sites, max_steps=args.max_steps, resume=args.resume, extra_args=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
