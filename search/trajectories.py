"""Search episodes as canonical trajectories: ``OUT/trajectories.parquet`` in the pinned schema
(``data.schema``), which ``python -m data.ingest --source canonical --input OUT/trajectories.parquet``
reads back, so that the episodes that succeeded become demonstrations (graphs, negatives,
preferences) grown from what the agent did.

One row per observation the agent acted on, with the action it executed (a refused ``goto`` keeps
the refusal as ``action_error``; an executed action, BrowserGym's error from the next observation),
then the final observation with a null action. A step without an executed action (no valid
candidate) adds no row: the next step decides on the same page. ``success`` is the task's reward
> 0, null for an episode that was never evaluated (an environment failure); ``intent`` is the goal
the policy saw; ``traj_id`` is ``<run_id>/<task_id>`` (unique across runs ingested together).
``site`` is the benchmark's (``trajectory_site``), except that a MiniWoB++ task page is site
``miniwob`` wherever the wheel is installed (``data.sites``' rule, as in AgentLab runs of the same
task), so episodes and demonstrations of one task build one graph.

Each task's rows are kept beside its log as ``tasks/<task_id>.trajectory.arrow`` (Arrow IPC: a
folder ingest of ``OUT`` reads only the ``.parquet``), written by whichever process ran the episode;
the run's file is rebuilt from them at the end of every run, resumed tasks included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from pyarrow import feather

from data.rundir import atomic_write_bytes, atomic_write_parquet
from data.schema import (
    ROW_GROUP_SIZE,
    TRAJECTORY_SCHEMA,
    StepRecord,
    for_storage,
    steps_to_table,
)
from data.sites import MINIWOB_SITE, miniwob_task

SOURCE = "search"
SUFFIX = ".trajectory.arrow"
TASK_META = ("task", "seed")


def episode_records(decided: list, final, row: dict, *, run_id: str, benchmark: str, site_of_obs,
                    settings: dict | None = None) -> list[StepRecord]:
    """The canonical rows of one episode: ``decided`` is ``[(step record, observation decided on)]``,
    ``final`` the last observation (None when the page never loaded: no rows)."""
    if final is None:
        return []
    success = bool((row.get("reward") or 0) > 0) if row.get("evaluated") else None
    task_id = str(row["task_id"])
    meta = {"benchmark": benchmark, "run_id": run_id, "task_id": task_id, "termination": row.get("termination"),
            "reward": row.get("reward"), **(settings or {})}
    pairs = []
    for i, (step, obs) in enumerate(decided):
        if getattr(step, "chosen", None) is None:
            continue
        after = decided[i + 1][1] if i + 1 < len(decided) else final
        pairs.append((obs, step.chosen, step.error or after.last_action_error or None))
    pairs.append((final, None, None))
    path = f"tasks/{task_id}.jsonl"
    def site(obs) -> str:
        return MINIWOB_SITE if miniwob_task(obs.url) else site_of_obs(obs)

    return [StepRecord(source=SOURCE, site=site(obs), task_id=task_id, traj_id=f"{run_id}/{task_id}",
                       step_idx=i, intent=obs.goal, url=obs.url, observation=obs.axtree, obs_format="indented",
                       html=None, action=action, action_error=error, thought=None, success=success,
                       source_path=path, meta=json.dumps(meta))
            for i, (obs, action, error) in enumerate(pairs)]


def trajectory_keeper(benchmark, config, out: Path, run_id: str, task: dict):
    """``keep(decided, final, row)`` for ``search.episodes.run_task``: writes the task's rows
    (their site: ``benchmark.trajectory_site(task, obs)``); ``meta`` also holds the task config's
    ``TASK_META`` keys (MiniWoB: the task's name and the episode's seed, which replay it)."""
    settings = {k: getattr(config, k) for k in ("prm", "policy", "n")}
    settings.update({k: task[k] for k in TASK_META if k in task})

    def keep(decided, final, row):
        records = episode_records(decided, final, row, run_id=run_id, benchmark=benchmark.name,
                                  site_of_obs=lambda obs: benchmark.trajectory_site(task, obs), settings=settings)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, TRAJECTORY_SCHEMA) as writer:
            writer.write_table(steps_to_table(records))
        atomic_write_bytes(Path(out) / "tasks" / f"{row['task_id']}{SUFFIX}", sink.getvalue().to_pybytes())
    return keep


def write_run_trajectories(out: Path, task_ids: list) -> int:
    """``OUT/trajectories.parquet`` from the kept rows of ``task_ids`` (the run's tasks, in storage
    order); returns the number of rows."""
    parts = [Path(out) / "tasks" / f"{t}{SUFFIX}" for t in task_ids]
    tables = [feather.read_table(p) for p in parts if p.exists()]
    table = pa.concat_tables(tables) if tables else TRAJECTORY_SCHEMA.empty_table()
    atomic_write_parquet(Path(out) / "trajectories.parquet", for_storage(table.cast(TRAJECTORY_SCHEMA)),
                         row_group_size=ROW_GROUP_SIZE)
    return table.num_rows
