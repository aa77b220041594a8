"""The ``build-graphs`` Prefect flow: one task per site, cached and retried.

    python -m flows.build_graphs --run RUN [--identity paper|ours --containment paper|ours --max-depth N \
        --max-nodes N --include-failed --workers N] [--dask-address tcp://host:8786 | --dask-local --dask-workers N]

Threads by default; ``--dask-address`` sends the per-site tasks to a Dask cluster through
``prefect-dask`` (``--dask-local`` starts a local one of ``--dask-workers`` processes:
``flows.common.DaskConfig``), the path for users who outgrow one machine. The logic lives in
:mod:`graph.build`, and the flow runs the CLI's own steps: its checks and plan
(``graph.build.prepare``: the same one-line errors, the input fingerprints in ``stats.json``), one
task per site (``build_and_write_site``), then ``finalize`` (the same manifest, ``stats.json``
entry and ``rejects.jsonl`` lines). The summary is posted as a markdown artifact. The flow takes
``graph.build.BuildConfig`` (``config``: the CLI's flags as fields, so flags and defaults come
from one place); ``workers`` sizes the thread pool of the per-site tasks.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict
from pathlib import Path

from prefect import flow, task
from prefect.futures import as_completed
from prefect.task_runners import ThreadPoolTaskRunner

import data
import graph
from data.loss import stage_loss_line
from data.rundir import Reject, RunDir
from flows.common import (
    DaskConfig,
    cli_flow,
    dask_gave_up,
    dask_scheduler,
    exit_code,
    on_dask,
    post_markdown,
    retry_unless_refused,
    stage_task,
    unwrap,
)
from graph.build import LOSS_WHY, BuildConfig, build_and_write_site, finalize, prepare
from graph.parsed import LINES_FILE, OBS_FILE

# The code a site's graph depends on: a change to any of these files invalidates cached builds.
_CODE = [Path(graph.__file__).parent / name for name in ("axtree.py", "identity.py", "resolve.py", "passes.py",
                                                          "build.py", "parsed.py", "schema.py")] + \
        [Path(data.__file__).parent / name for name in ("actions.py", "sites.py", "schema.py")]
OUTPUTS = ("nodes.parquet", "edges.parquet", "steps.parquet", LINES_FILE, OBS_FILE)


def _fingerprint(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _code_version() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in _CODE)).hexdigest()[:16]


def outputs_fingerprint(run: str | Path, site: str) -> str | None:
    """Size and mtime of a site's written files (None if any is missing)."""
    out = RunDir(run).graph_dir(site)
    paths = [out / name for name in OUTPUTS]
    return "|".join(_fingerprint(p) for p in paths) if all(p.exists() for p in paths) else None


def _site_cache_key(context, parameters) -> str:
    """A site's build is reused while the trajectories file, the graph code and the build's
    settings (all but ``workers``) are unchanged."""
    settings = {k: v for k, v in asdict(parameters["config"]).items() if k != "workers"}
    raw = "|".join([_code_version(), parameters["fingerprint"], parameters["site"],
                    json.dumps(settings, sort_keys=True)])
    return "build-site-" + hashlib.sha256(raw.encode()).hexdigest()[:32]


@task(name="build-site-graph", retries=2, retry_delay_seconds=2, cache_key_fn=_site_cache_key,
      persist_result=True, retry_condition_fn=retry_unless_refused)
@stage_task
def build_site_graph(run: str, site: str, site_plan: dict, fingerprint: str,
                     config: BuildConfig) -> tuple[tuple[str, dict, list[Reject]], str | None]:
    """Build and write one site's graph; returns ((site, stats, rejects), fingerprint of the
    files written) so that a cached result is used only while those files are untouched."""
    result = build_and_write_site(run, site, site_plan, config)
    return result, outputs_fingerprint(run, site)


@flow(name="build-graphs", task_runner=ThreadPoolTaskRunner(max_workers=4), log_prints=True)
@cli_flow
def build_graphs_flow(run: str, config: BuildConfig | None = None) -> dict:
    """Build the Interaction Element Graph of every site of a run directory (``config``: how, as
    ``graph.build``'s flags; default ``BuildConfig()``)."""
    config = config or BuildConfig()
    rundir, n_rows, per_site, plan_rejects = prepare(run, config.include_failed)     # the CLI's checks and plan
    fingerprint = _fingerprint(rundir.trajectories)
    args = {site: (str(rundir.root), site, site_plan, fingerprint, config)
            for site, site_plan in sorted(per_site.items())}
    futures = {site: build_site_graph.submit(*a) for site, a in args.items()}
    site_of = {id(f): site for site, f in futures.items()}
    for future in as_completed(list(futures.values())):     # a task Dask gave up on fails the flow at once
        dask_gave_up(future, f"build-site-graph of site {site_of[id(future)]!r}")
    results = []
    for site, future in futures.items():
        future.wait()
        result, written = unwrap(future.state)
        # A cached result is only as good as the files it describes: if they were removed or
        # rewritten since (another build, a manual edit), build the site again.
        if written is None or outputs_fingerprint(run, site) != written:
            result, _ = unwrap(build_site_graph.with_options(refresh_cache=True)(*args[site], return_state=True))
        results.append(result)
    stats = finalize(rundir, results, plan_rejects, n_rows, config.include_failed, config)
    loss = stage_loss_line(stats, "steps", why=LOSS_WHY)        # as graph.build's CLI
    lines = [stats.summary(), *([loss] if loss else []), f"{stats.extra['sites']} site graphs",
             f"wrote {rundir.graph_manifest}"]
    print("\n".join(lines))
    post_markdown("build-graphs-summary", "\n\n".join(lines), f"graph.build of {run}")
    return stats.as_dict()


def build_parser():
    """``graph.build``'s own parser (``--run``, ``BuildConfig``) and ``DaskConfig``."""
    ap = graph.build.build_parser("python -m flows.build_graphs", __doc__)
    DaskConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = BuildConfig.from_args(args)
    with dask_scheduler(DaskConfig.from_args(args)) as address:
        fl = on_dask(build_graphs_flow, address) if address else \
            build_graphs_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=config.workers or 4))
        state = fl(run=args.run, config=config, return_state=True)
    code = exit_code(state)
    return code if code or state.result()["out"] else 1       # as graph.build: nothing built is a failure


if __name__ == "__main__":
    sys.exit(main())
