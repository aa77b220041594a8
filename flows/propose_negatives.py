"""The ``propose-negatives`` Prefect flow: mine grounded negatives for a run.

    python -m flows.propose_negatives --run RUN [--sample-size 10000 --seed 42 --axes spatial,temporal --no-graph \
        --selection sample|rank --max-per-rule 3 --near-hops 2 --prefer-same-op --fill-model FOLDER \
        --fill-base-url URL ...] \
        [--dask-address tcp://host:8786 | --dask-local --dask-workers N]

By default one task (the rules run per step, then fill values are completed in one batch through
the LLM layer, whose cache makes a retried or resumed run free) that calls ``proposals.mine.mine``
as the CLI does. On Dask (``flows.common.DaskConfig``) the rules run as one ``mine-chunk`` task per
site, or per ``TASK_TRAJECTORIES`` of a site's trajectories (``proposals.mine.mine_chunk``, which
reads and mines them ``CHUNK_ROWS`` observations at a time, so a worker's memory does not grow with
the pool); this process then asks the fill values (each distinct prompt once for the whole run,
through the fill model's LLM cache), samples the pool (seed 42) and writes the files once
(``proposals.mine.write_chunks``), so the outputs are byte-identical to the CLI's. A task that Dask
gives up on (its workers died: over ``--dask-memory-limit``?) ends the flow at once with its site.
Either way: the same flags (``proposals.mine.build_parser``: ``MineCommand``, ``MineConfig`` and the
fill model's ``LLMConfig`` under ``--fill-``), the same one-line errors (``flows.common``), the same
files; the summary is posted as a markdown artifact. The logic lives in ``proposals.mine``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed

from cli.progress import progress as progress_bar
from data.rundir import StageStats
from flows.common import (
    DaskConfig,
    cli_flow,
    dask_gave_up,
    dask_scheduler,
    exit_code,
    final_state,
    on_dask,
    post_markdown,
    retry_unless_refused,
    stage_task,
    unwrap,
)
from llm import LLMConfig
from proposals.mine import (
    STAGE,
    MineCommand,
    MineConfig,
    done_summary,
    format_audit,
    loss_summary,
    mine,
    mine_chunk,
    open_run,
    plan_chunks,
    plan_trajectories,
    write_chunks,
)
from proposals.mine import build_parser as mine_parser
from proposals.spool import spool_dir


def _report(stats: StageStats, run: str) -> dict:
    loss = loss_summary(stats)
    text = "\n".join([format_audit(stats), *([loss] if loss else []), done_summary(stats, run)])
    print(text)
    post_markdown("propose-negatives-summary", "```\n" + text + "\n```", f"proposals.mine of {run}")
    return stats.as_dict()


@task(name="mine-candidates", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_refused)
@stage_task
def mine_candidates(run: str, config: MineConfig, fill_llm: LLMConfig | None, workers: int | None = None,
                    progress: bool = True) -> dict:
    return _report(mine(run, config, fill_llm, workers=workers, show_progress=progress), run)


TASK_TRAJECTORIES = 256       # trajectories of one site a mine-chunk task mines at most


@task(name="mine-chunk", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_refused,
      cache_policy=NO_CACHE)
@stage_task
def mine_chunk_task(run: str, config: MineConfig, site: str, trajs: dict[str, int], spool: str) -> tuple:
    """One chunk of a site's negatives (``proposals.mine.mine_chunk``): its final rows and rejects
    spooled to files under ``spool``, the negatives that wait for fill values returned."""
    return mine_chunk(run, config, site, trajs, spool)


def mine_by_chunk(run: str, config: MineConfig, fill_llm: LLMConfig | None, progress: bool) -> dict:
    """One ``mine-chunk`` task per chunk, then the fills, the sample and the files here, once."""
    rundir = open_run(run, config)              # the CLI's checks and the stage lock, held by this process
    t0 = time.perf_counter()
    root = str(rundir.root.resolve())           # the workers' path to the run (a shared filesystem)
    trajs = plan_trajectories(rundir)
    chunks = plan_chunks(trajs, TASK_TRAJECTORIES)
    with spool_dir(Path(root)) as spool:        # the chunks' rows and rejects, on the shared filesystem
        futures = [mine_chunk_task.submit(root, config, site, chunk, str(spool)) for site, chunk in chunks]
        site_of = {id(future): (site, len(chunk)) for future, (site, chunk) in zip(futures, chunks)}
        with progress_bar(len(trajs), f"{STAGE} mining", unit="traj", enabled=progress) as bar:
            for future in as_completed(futures):
                site, n = site_of[id(future)]
                dask_gave_up(future, f"mine-chunk of site {site!r} ({n} trajectories)")
                bar.update(n)
        results = [unwrap(final_state(future)) for future in futures]
        return _report(write_chunks(rundir, config, results, fill_llm, progress, t0), run)


@flow(name="propose-negatives", log_prints=True)
@cli_flow
def propose_negatives_flow(run: str, config: MineConfig | None = None, fill_llm: LLMConfig | None = None,
                           workers: int | None = None, progress: bool = True, by_chunk: bool = False) -> dict:
    """Mine the candidate pool and the seeded sample of a run directory. ``config``: how
    (``proposals.mine``'s flags as fields, the rules' ``params`` nested); ``fill_llm``: the model
    that completes fill values (default: ``LLMConfig()``, the embedded model); ``workers``:
    processes (default: one per core); ``progress``: bars on stderr; ``by_chunk``: one task per
    chunk of a site's trajectories on the flow's task runner (Dask) instead of one task
    (``workers`` then unused)."""
    if by_chunk:
        return mine_by_chunk(run, config or MineConfig(), fill_llm, progress)
    return unwrap(mine_candidates(run, config or MineConfig(), fill_llm, workers, progress, return_state=True))


def build_parser():
    """``proposals.mine``'s own flags (one parser for both commands) and ``DaskConfig``."""
    ap = mine_parser("python -m flows.propose_negatives", __doc__)
    DaskConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = MineCommand.from_args(args)
    with dask_scheduler(DaskConfig.from_args(args)) as address:
        state = on_dask(propose_negatives_flow, address)(
            run=cmd.run, config=MineConfig.from_args(args), fill_llm=LLMConfig.from_args(args, prefix="fill-"),
            workers=cmd.workers, progress=not cmd.quiet, by_chunk=address is not None, return_state=True)
    code = exit_code(state)
    return code if code or state.result()["out"] else 1       # as proposals.mine: an empty pool is a failure


if __name__ == "__main__":
    sys.exit(main())
