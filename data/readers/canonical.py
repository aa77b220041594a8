"""Canonical ``trajectories.parquet`` files (this project's own format) -> validated steps.

For data already converted (the bundled sample, or a user's own converter's output): every
row is checked as a fresh record would be, so a hand-made file cannot smuggle in an
unparseable action or an empty observation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from data.actions import ActionParseError, parse_action
from data.rundir import Reject
from data.schema import TRAJECTORY_SCHEMA, StepRecord

STAGE = "ingest"
REQUIRED = ("source", "site", "task_id", "traj_id", "step_idx", "intent", "url", "observation", "obs_format")


def read_canonical(inputs: list[Path]) -> Iterator[StepRecord | Reject]:
    for root in inputs:
        files = [root] if root.is_file() else sorted(root.rglob("*.parquet"))
        for path in files:
            try:
                table = pq.read_table(path)
            except (OSError, ValueError) as e:
                yield Reject(STAGE, "corrupt_file", str(path), f"{type(e).__name__}: {e}")
                continue
            missing_cols = [c for c in REQUIRED if c not in table.column_names]
            if missing_cols:
                yield Reject(STAGE, "missing_field", str(path), f"missing columns {missing_cols}")
                continue
            for i, row in enumerate(table.to_pylist()):
                src = f"{path}#{i}"
                row = {name: row.get(name) for name in TRAJECTORY_SCHEMA.names}
                key = {"traj_id": row["traj_id"], "step_idx": row["step_idx"]}
                missing = [c for c in REQUIRED if row[c] in (None, "")]
                if missing:
                    yield Reject(STAGE, "missing_field", src, f"missing {missing}", key)
                    continue
                if row["obs_format"] not in ("indented", "flat"):
                    yield Reject(STAGE, "missing_field", src, f"obs_format {row['obs_format']!r}", key)
                    continue
                if row["action"] is not None:
                    try:
                        row["action"] = parse_action(row["action"]).to_string()
                    except ActionParseError as e:
                        yield Reject(STAGE, "unparseable_action", src, str(e), key)
                        continue
                row["source_path"] = row["source_path"] or src
                row["meta"] = row["meta"] or "{}"
                yield StepRecord(**row)
