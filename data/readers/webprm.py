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
    """(source, row) per row of a file; a row that is not valid JSON comes back as an exception."""
    if path.suffix == ".parquet":
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path}#{i}", row
    elif path.suffix == ".jsonl":
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if line.strip():
                try:
                    yield f"{path}#{i}", json.loads(line)
                except ValueError as e:
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
    if isinstance(row, Exception):
        return Reject(STAGE, "corrupt_file", src, f"{type(row).__name__}: {row}")
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
        return Reject(STAGE, "missing_field", src, f"step_id {row['step_id']!r} is not an integer", key)
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
    """Chosen actions of the WebPRM Collection are expert demonstrations: ``success`` is True."""
    records: list[StepRecord] = []
    for root in inputs:
        for path in find_files(root):
            try:
                rows = list(_rows(path))
            except (OSError, ValueError, RecursionError) as e:
                yield Reject(STAGE, "corrupt_file", str(path), f"{type(e).__name__}: {e}")
                continue
            for src, row in rows:
                rec = _record(src, row)
                if isinstance(rec, Reject):
                    yield rec
                else:
                    records.append(rec)
    # Trajectory order; a repeated (task, step) is rejected by data.ingest.
    yield from sorted(records, key=lambda r: (r.traj_id, r.step_idx))
