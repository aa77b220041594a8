"""WebPRM Collection rows (JSON, JSONL or Parquet) -> canonical steps.

A row is one step of a demonstration: ``task_id, step_id, intent, website_name, start_url,
thought_history, action_history, current_url, text_observation, checklist, ..., chosen,
rejected``. Rows of one ``task_id`` ordered by ``step_id`` form a trajectory; the demonstrated
action is ``chosen.action`` (``chosen`` is a dict, or a list of dicts in the full collection).
``text_observation`` is a flat AXTree (no indentation) after a ``Tab N (current): ...`` header.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from data.actions import ActionParseError, parse_action
from data.rundir import Reject
from data.schema import StepRecord
from data.sites import site_of

STAGE = "ingest"
SUFFIXES = (".json", ".jsonl", ".parquet")
REQUIRED = ("task_id", "step_id", "intent", "text_observation", "chosen")
_KEPT_META = ("website_name", "start_url", "checklist", "checklist_target_list", "rejected",
              "action_history", "prefer", "domain_group", "rel_bin", "bucket")


def find_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)


def _rows(path: Path) -> Iterator[tuple[str, object]]:
    """(source, row) per row of a file; a row that cannot be decoded (not UTF-8, not valid
    JSON) comes back as an exception, so it costs only itself. JSONL is split on newline bytes
    only (a U+2028 inside a JSON string is not a line break)."""
    if path.suffix == ".parquet":
        f = pq.ParquetFile(path)
        i = 0
        for g in range(f.num_row_groups):
            try:
                rows = f.read_row_group(g).to_pylist()
            except Exception as e:  # noqa: BLE001  (a corrupt row group costs its rows only)
                yield f"{path}@rowgroup{g}", e
                i += f.metadata.row_group(g).num_rows
                continue
            for row in rows:
                yield f"{path}#{i}", row
                i += 1
    elif path.suffix == ".jsonl":
        with open(path, "rb") as f:
            for i, raw in enumerate(f):
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield f"{path}#{i}", e
                    continue
                try:
                    yield f"{path}#{i}", json.loads(line)
                except (ValueError, RecursionError) as e:
                    yield f"{path}#{i}", e
    else:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, list):
            for i, row in enumerate(data):
                yield f"{path}#{i}", row
        else:
            yield str(path), data


def _chosen(row: dict) -> tuple[dict | None, list]:
    chosen = row.get("chosen")
    if isinstance(chosen, str):
        try:
            chosen = json.loads(chosen)
        except ValueError:
            return None, []
    if isinstance(chosen, list):
        return (chosen[0] if chosen and isinstance(chosen[0], dict) else None), chosen[1:]
    return (chosen if isinstance(chosen, dict) else None), []


def _record(src: str, row) -> StepRecord | Reject:
    """One row as a record, or the Reject saying why it cannot be one; never raises."""
    try:
        return _convert(src, row)
    except Exception as e:  # noqa: BLE001  (one odd row never costs the others)
        key = {"task_id": _text(row.get("task_id"))} if isinstance(row, dict) else {}
        return Reject(STAGE, "bad_record", src, f"{type(e).__name__}: {_text(e)}", key)


def _text(value, limit: int = 300) -> str:
    try:
        text = str(value)
    except Exception:  # noqa: BLE001  (an int past the digit limit)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def _convert(src: str, row) -> StepRecord | Reject:
    if isinstance(row, UnicodeDecodeError):
        return Reject(STAGE, "bad_encoding", src, f"not UTF-8: {_text(row)}")
    if isinstance(row, Exception):
        return Reject(STAGE, "corrupt_file", src, f"{type(row).__name__}: {_text(row)}")
    if not isinstance(row, dict):
        return Reject(STAGE, "missing_field", src, f"row is a {type(row).__name__}, not an object")
    # An empty observation is its own reason (below), not a missing field.
    missing = [k for k in REQUIRED if row.get(k) is None or (row.get(k) == "" and k != "text_observation")]
    if missing:
        return Reject(STAGE, "missing_field", src, f"missing {', '.join(missing)}",
                      {"task_id": str(row.get("task_id"))})
    key = {"task_id": str(row["task_id"]), "step_id": str(row["step_id"])}
    try:
        step_idx = int(row["step_id"])
    except (TypeError, ValueError):
        return Reject(STAGE, "missing_field", src, f"step_id {_text(row['step_id'])} is not an integer", key)
    except OverflowError:    # step_id: Infinity
        return Reject(STAGE, "bad_step_index", src, f"step_id {row['step_id']!r} is not finite", key)
    obs = row["text_observation"]
    for name in ("text_observation", "intent"):
        if not isinstance(row[name], str):
            return Reject(STAGE, "bad_field_type", src, f"{name} is {type(row[name]).__name__}, not str", key)
    if not obs.strip():
        return Reject(STAGE, "empty_observation", src, "empty text_observation", key)
    if not str(row["intent"]).strip():
        return Reject(STAGE, "missing_goal", src, "empty intent", key)
    chosen, more = _chosen(row)
    if not chosen or not chosen.get("action"):
        return Reject(STAGE, "missing_field", src, "chosen has no action", key)
    try:
        action = parse_action(str(chosen["action"])).to_string()
    except ActionParseError as e:
        return Reject(STAGE, "unparseable_action", src, str(e), key)
    url = str(row.get("current_url") or row.get("start_url") or "")
    site = site_of(url) if url else str(row.get("website_name") or "unknown")
    meta = {k: row[k] for k in _KEPT_META if k in row}
    if more:
        meta["chosen_alternatives"] = more
    return StepRecord(
        source="webprm", site=site, task_id=str(row["task_id"]), traj_id=f"webprm:{row['task_id']}",
        step_idx=step_idx, intent=str(row["intent"]).strip(), url=url, observation=obs,
        obs_format="flat", html=None, action=action, action_error=None,
        thought=chosen["thought"] if isinstance(chosen.get("thought"), str) and chosen["thought"] else None,
        success=True, source_path=src,
        meta=json.dumps(meta, ensure_ascii=False, default=str))


def read_webprm(inputs: list[Path]) -> Iterator[StepRecord | Reject]:
    """Chosen actions of the WebPRM Collection are expert demonstrations: ``success`` is True.
    Records come in file order, one at a time (``data.ingest`` sorts what it keeps; a repeated
    (task, step) is rejected there, the first one read kept)."""
    for root in inputs:
        for path in find_files(root):
            rows = _rows(path)
            while True:
                try:
                    src, row = next(rows)
                except StopIteration:
                    break
                except Exception as e:  # noqa: BLE001  (the file itself: unreadable, not JSON, not Parquet)
                    yield Reject(STAGE, "corrupt_file", str(path), f"{type(e).__name__}: {_text(e)}")
                    break
                yield _record(src, row)
