"""Episodes of one search run in parallel: Prefect tasks on a Dask cluster (``--workers N``).

    python -m search.miniwob --prm embedded --policy embedded --tasks axtree10 --seeds 0-4 --workers 2
    python -m search.miniwob ... --dask-address tcp://scheduler:8786     # an existing cluster

``--workers N`` starts a local Dask cluster of N worker processes, one thread each (``prefect-dask``'s
``DaskTaskRunner``); ``--dask-address`` sends the episodes to an existing scheduler instead. Workers
are processes because BrowserGym holds one process-global sync Playwright: two episodes in one
process would share it. Each worker process loads the policy and the PRM at its first episode and
keeps them (``search.episodes.episode_runner``, without the per-step bar: the calling process shows
one bar of finished episodes); an episode writes its own task files under ``--out``,
so on a remote cluster ``--out`` must be a folder every worker sees. The run's folder, resume,
summary and ``trajectories.parquet`` stay with the calling process (``search.runner.run_search``).
It lives in ``search`` rather than ``flows`` so that every search CLI has ``--workers``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE

from search.episodes import RunFolder, episode_runner

_RUNNERS: dict[str, object] = {}        # per worker process: (benchmark, config, run) -> run_one
_STACK = contextlib.ExitStack()         # what a worker's episodes share for its life (the demo shop)


@task(name="search-episode", cache_policy=NO_CACHE)
def search_episode(benchmark, config, task_config: dict, run_id: str) -> dict:
    """One episode in this worker process; its result row."""
    key = json.dumps([benchmark.name, run_id, asdict(config)], sort_keys=True, default=str)
    if key not in _RUNNERS:
        _RUNNERS[key] = episode_runner(benchmark, config, RunFolder(config.out, run_id), _STACK, step_progress=False)
    return _RUNNERS[key](task_config)


@flow(name="search-episodes")
def search_episodes_flow(benchmark, config, todo: list[dict], run_id: str) -> list[dict]:
    """Every episode of ``todo`` as a ``search-episode`` task; the result rows in ``todo``'s order,
    with a progress bar of the finished episodes (``cli.progress``)."""
    from prefect.futures import as_completed

    from cli.progress import progress

    futures = search_episode.map(unmapped(benchmark), unmapped(config), todo, unmapped(run_id))
    with progress(len(futures), f"{benchmark.name} episodes", "episode") as bar:
        for f in as_completed(futures):
            f.wait()
            bar.update(1)
    return [f.result() for f in futures]


def prefect_api_url() -> str:
    """The Prefect API this process reports to: the configured one, else its temporary server
    (started here if not yet). A local cluster's workers get it, else each would start a temporary
    server of its own (~20 s each on 2 cores)."""
    from prefect.settings import PREFECT_API_URL

    if url := PREFECT_API_URL.value():
        return url
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()         # the one Prefect itself starts (one per process)
    server.start()
    return server.api_url


def task_runner(workers: int, address: str | None = None):
    """A ``DaskTaskRunner`` on ``address`` (its workers' Prefect settings are the cluster's), else on
    a local cluster of ``workers`` processes that report to this process's Prefect API."""
    from prefect_dask import DaskTaskRunner

    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True,
                                          "env": {"PREFECT_API_URL": prefect_api_url()}})


def run_on_dask(benchmark, config, todo: list[dict], run_id: str) -> list[dict]:
    """The result rows of ``todo``'s episodes, run on Dask (see the module docstring)."""
    runner = task_runner(config.workers, config.dask_address)
    return search_episodes_flow.with_options(task_runner=runner)(benchmark, config, todo, run_id)
