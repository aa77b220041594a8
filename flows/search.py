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
settings) fails the task at once with the message naming it, in one ``error:`` line and with the
CLI's exit code 2 (no retry: nothing would change), as does a run in which no task could run
(every task ended in an environment failure; code 1); the runs are resumable, so a retry of a run
that crashed only finishes the remaining tasks. The run's summary (MAG: ``table.md``) is posted as a
markdown artifact.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from prefect import flow, task

from flows.common import StageError, cli_flow, exit_code, post_markdown, retry_unless_refused, stage_task, unwrap
from search.mag import MAG, MagSearch
from search.miniwob import MINIWOB, MiniWoBSearch
from search.runner import Benchmark, SearchConfig, SetupError, nothing_ran, parse_config, run_search
from search.runner import build_parser as search_parser
from search.webarena import WEBARENA_LITE, WebArenaSearch


@task(name="search-run", retries=1, retry_condition_fn=retry_unless_refused)
@stage_task
def search_task(benchmark: Benchmark, config: SearchConfig) -> dict:
    """``search.runner.run_search``; its summary. Fails with the setup error's message, or when
    no task could run (a ``Failed`` state with the line, as the CLI prints it)."""
    try:
        summary = run_search(benchmark, config)
    except SetupError as e:
        raise StageError(f"{benchmark.name} setup failed: {e}") from None
    table = Path(config.out) / "table.md"          # MAG's Table-1 row; the others: summary.json as it is
    post_markdown(f"{benchmark.name.replace('.', '-')}-summary",
                  table.read_text(encoding="utf-8") if table.exists() else
                  "```json\n" + json.dumps(summary, indent=2, default=str) + "\n```",
                  f"{benchmark.name} run in {config.out}")
    if why := nothing_ran(summary):
        raise StageError(f"{benchmark.name}: {why} (summary in {config.out})", code=1)
    return summary


@flow(name="search-webarena", log_prints=True)
@cli_flow
def search_webarena_flow(config: WebArenaSearch) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on WebArena-Lite (``demo``: on the
    built-in demo shop); returns the summary."""
    summary = unwrap(search_task(WEBARENA_LITE, config, return_state=True))
    print(f"macro success {summary['macro']['success_rate']} over {summary['tasks']} tasks -> {config.out}")
    return summary


@flow(name="search-miniwob", log_prints=True)
@cli_flow
def search_miniwob_flow(config: MiniWoBSearch) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on MiniWoB++ from the installed wheel;
    returns the summary (``per_task``, ``macro.success_rate``)."""
    summary = unwrap(search_task(MINIWOB, config, return_state=True))
    print(f"success rate {summary['macro']['success_rate']} over {summary['tasks']} episodes -> {config.out}")
    return summary


@flow(name="search-mag", log_prints=True)
@cli_flow
def search_mag_flow(config: MagSearch) -> dict:
    """Run PRM-guided (or ``prm='none'``: unguided) search on MAG (``demo``: on the built-in demo
    shop); returns the Table-1 summary."""
    summary = unwrap(search_task(MAG, config, return_state=True))
    print(f"SR {summary['SR']}, OFCR {summary['OFCR']}, GGS {summary.get('GGS')} over {summary['tasks']} tasks "
          f"-> {config.out}")
    return summary


PROG = "python -m flows.search"
# subcommand -> (benchmark, flow); no subcommand: WebArena-Lite
FLOWS = {"miniwob": (MINIWOB, search_miniwob_flow), "mag": (MAG, search_mag_flow)}


def build_parser():
    """The WebArena-Lite flow's flags (the search CLIs' own, ``search.runner.build_parser``);
    ``miniwob`` and ``mag`` as the first argument take those of ``search.miniwob`` and ``search.mag``."""
    return search_parser(WEBARENA_LITE, prog=f"{PROG} [miniwob|mag]", doc=__doc__)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in FLOWS:      # bad flags fail here, before a flow run starts
        benchmark, run = FLOWS[argv[0]]
        config = parse_config(benchmark, argv[1:], prog=f"{PROG} {argv[0]}", doc=__doc__)
    else:
        run, config = search_webarena_flow, parse_config(WEBARENA_LITE, argv, prog=f"{PROG} [miniwob|mag]", doc=__doc__)
    return exit_code(run(config, return_state=True))


if __name__ == "__main__":
    sys.exit(main())
