"""The ``search-webarena``, ``search-miniwob`` and ``search-mag`` Prefect flows: knockout best-of-N
search with a PRM on WebArena-Lite, on MiniWoB++ (offline), and on MAG (screenshots, Set-of-Mark
menu, a guide per step).

    python -m flows.search --prm runs/demo/prm/cpu-demo --policy gpt-4o \\
        --policy-base-url https://api.openai.com/v1 --sites shopping --out runs/wa/prm
    python -m flows.search miniwob --prm embedded --policy embedded --tasks axtree10 --seeds 0-4 --workers 2 \\
        --out runs/miniwob/prm
    python -m flows.search mag --prm runs/demo/prm/cpu-demo --policy gpt-4o \\
        --policy-base-url https://api.openai.com/v1 --gold-guides gold.jsonl --out runs/mag/prm

Each flow takes the run's typed config (``search.webarena.WebArenaSearch``,
``search.miniwob.MiniWoBSearch``, ``search.mag.MagSearch``: the search CLIs' flags as fields; the
command line above parses into it) and calls ``search.runner.run_search``; the logic lives in
:mod:`search`. With ``workers`` > 1 (or ``dask_address``) the run's episodes are a nested
``search-episodes`` flow of Prefect tasks on Dask (``search.workers``). A setup failure
(a missing ``WA_*`` variable, an unreachable site, bad tasks or flags, a resume with other
settings) fails the task at once with the message naming it (no retry: nothing would change), as
does a run in which no task could run (every task ended in an environment failure); the runs are
resumable, so a retry of a failed run only finishes the remaining tasks.
"""

from __future__ import annotations

import sys

from prefect import flow, task

from search.mag import Mag, MagSearch
from search.miniwob import MiniWoB, MiniWoBSearch
from search.runner import Benchmark, SearchConfig, SetupError, nothing_ran, parse_config, run_search
from search.webarena import WebArenaLite, WebArenaSearch


@task(name="search-run")
def search_task(benchmark: type[Benchmark], config: SearchConfig) -> dict:
    """``search.runner.run_search``; its summary. Fails with the setup error's message, or when
    no task could run."""
    try:
        summary = run_search(benchmark, config)
    except SetupError as e:
        raise RuntimeError(f"{benchmark.name} setup failed: {e}") from None
    if why := nothing_ran(summary):
        raise RuntimeError(f"{benchmark.name}: {why} (summary in {config.out})")
    return summary


@flow(name="search-webarena", log_prints=True)
def search_webarena_flow(config: WebArenaSearch) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on WebArena-Lite (``demo``: on the
    built-in demo shop); returns the summary."""
    summary = search_task(WebArenaLite, config)
    print(f"macro success {summary['macro_success']} over {summary['tasks']} tasks -> {config.out}")
    return summary


@flow(name="search-miniwob", log_prints=True)
def search_miniwob_flow(config: MiniWoBSearch) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on MiniWoB++ from the installed wheel;
    returns the summary (``per_task``, ``macro.success_rate``)."""
    summary = search_task(MiniWoB, config)
    print(f"success rate {summary['macro']['success_rate']} over {summary['tasks']} episodes -> {config.out}")
    return summary


@flow(name="search-mag", log_prints=True)
def search_mag_flow(config: MagSearch) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on MAG (``demo``: on the built-in demo
    shop); returns the Table-1 summary."""
    summary = search_task(Mag, config)
    print(f"SR {summary['SR']}, OFCR {summary['OFCR']}, GGS {summary.get('GGS')} over {summary['tasks']} tasks "
          f"-> {config.out}")
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mag"]:     # bad flags fail here, before a flow run starts
        search_mag_flow(parse_config(Mag, argv[1:]))
    elif argv[:1] == ["miniwob"]:
        search_miniwob_flow(parse_config(MiniWoB, argv[1:]))
    else:
        search_webarena_flow(parse_config(WebArenaLite, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
