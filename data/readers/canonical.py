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
BATCH = 256      # rows read and converted at a time
REQUIRED = ("source", "site", "task_id", "traj_id", "step_idx", "intent", "url", "observation", "obs_format")


def read_canonical(inputs: list[Path]) -> Iterator[StepRecord | Reject]:
    for root in inputs:
        files = [root] if root.is_file() else sorted(root.rglob("*.parquet"))
        for path in files:
            yield from _read_file(path)


def _read_file(path: Path) -> Iterator[StepRecord | Reject]:
    """The rows of one file, read row group by row group: a corrupt row group costs its rows."""
    try:
        f = pq.ParquetFile(path)
        names = f.schema_arrow.names
    except Exception as e:  # noqa: BLE001  (not Parquet, unreadable)
        yield Reject(STAGE, "corrupt_file", str(path), f"{type(e).__name__}: {_text(e)}")
        return
    missing_cols = [c for c in REQUIRED if c not in names]
    if missing_cols:
        yield Reject(STAGE, "missing_field", str(path), f"missing columns {missing_cols}")
        return
    i = 0
    for g in range(f.num_row_groups):
        n = f.metadata.row_group(g).num_rows
        done = 0
        try:
            # BATCH rows at a time: a row group of a large pool holds hundreds of MB of text
            for batch in f.iter_batches(batch_size=BATCH, row_groups=[g]):
                for row in batch.to_pylist():
                    src = f"{path}#{i}"
                    i += 1
                    done += 1
                    try:
                        yield _record(src, row)
                    except Exception as e:  # noqa: BLE001  (one odd row never costs the others)
                        yield Reject(STAGE, "bad_record", src, f"{type(e).__name__}: {_text(e)}", _key(row))
        except Exception as e:  # noqa: BLE001
            yield Reject(STAGE, "corrupt_file", f"{path}@rowgroup{g}", f"{type(e).__name__}: {_text(e)}")
            i += n - done


def _text(value, limit: int = 300) -> str:
    try:
        text = str(value)
    except Exception:  # noqa: BLE001
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def _key(row: dict) -> dict:
    return {"traj_id": _text(row.get("traj_id"), 200), "step_idx": _text(row.get("step_idx"), 40)}


def _record(src: str, row: dict) -> StepRecord | Reject:
    row = {name: row.get(name) for name in TRAJECTORY_SCHEMA.names}
    key = _key(row)
    missing = [c for c in REQUIRED if row[c] is None or row[c] == ""]
    if missing:
        return Reject(STAGE, "missing_field", src, f"missing {missing}", key)
    # Types before anything reads the values (a column of ints where text belongs).
    for name in ("source", "site", "task_id", "traj_id", "intent", "url", "observation", "obs_format",
                 "html", "action", "action_error", "thought", "source_path", "meta"):
        if row[name] is not None and not isinstance(row[name], str):
            return Reject(STAGE, "bad_field_type", src, f"{name} is {type(row[name]).__name__}, not str", key)
    if row["obs_format"] not in ("indented", "flat"):
        return Reject(STAGE, "missing_field", src, f"obs_format {row['obs_format']!r}", key)
    if row["action"] is not None:
        try:
            row["action"] = parse_action(row["action"]).to_string()
        except ActionParseError as e:
            return Reject(STAGE, "unparseable_action", src, str(e), key)
    row["source_path"] = row["source_path"] or src
    row["meta"] = row["meta"] or "{}"
    return StepRecord(**row)
