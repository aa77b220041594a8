"""AgentLab / BrowserGym experiment directories -> canonical steps.

An experiment directory holds ``summary_info.json``, ``goal_object.pkl.gz`` and one
``step_<t>.pkl.gz`` per step (a pickled ``StepInfo``). The observation at step t is what the
agent saw before acting; step t+1's ``last_action_error`` says whether that action failed.

Both formats are read: DemoAgent-style runs, whose ``action`` is the agent's output ending in a
fenced block, and today's AgentLab (0.3+, GenericAgent), whose ``action`` is the bare action
string and whose reasoning is ``agent_info.think`` (an ``AgentInfo``).

Folders are walked once each (symlinks are followed, loops are not), only regular files are
read (a FIFO or ``/dev/zero`` under a step's name is a reject, never a hang), and a trajectory's
id is its folder's name, made unique across input roots when two folders share it.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from data.actions import ActionParseError, action_and_thought, parse_action
from data.readers.safe_pickle import (
    DEFAULT_MAX_DECOMPRESSED_MB,
    NotRegularFileError,
    TooLargeError,
    UnexpectedClassError,
    load_gz,
    read_regular,
)
from data.rundir import Reject
from data.schema import StepRecord
from data.sites import site_of

STAGE = "ingest"
_STEP_FILE = re.compile(r"^step_(\d+)\.pkl\.gz$")
# AgentLab names runs "<date>_<time>_<Agent>_on_<task name>_<seed>[_<suffix>]".
_EXP_NAME = re.compile(r"_on_(?P<task>.+?)_(?P<seed>\d+)(?:_.*)?$")
_ROOT_URL = re.compile(r"^RootWebArea .*?, url='([^']*)'", re.M)
# summary_info.json is about 1.5 KB; a bigger one is not AgentLab's.
MAX_SUMMARY_BYTES = 4 * 2**20


def is_experiment_dir(path: Path) -> bool:
    return path.is_dir() and (
        os.path.lexists(path / "summary_info.json") or any(_STEP_FILE.match(p.name) for p in path.iterdir()))


def find_experiment_dirs(path: Path, errors: list | None = None) -> list[Path]:
    """``path`` itself if it is an experiment directory, else every one below it, each folder
    visited once (a symlink back to an ancestor, or two links to one folder, are walked once).
    A folder below ``path`` that cannot be listed is appended to ``errors`` as (folder, error)
    when a list is given (the walk goes on), else raises; ``path`` itself always raises."""
    found: list[Path] = []
    visited: set[tuple[int, int]] = set()
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            st = d.stat()
            if (st.st_dev, st.st_ino) in visited:
                continue
            visited.add((st.st_dev, st.st_ino))
            if is_experiment_dir(d):
                found.append(d)
                continue
            children = [p for p in d.iterdir() if _is_dir(p)]
        except OSError as e:
            if errors is None or d == path:
                raise
            errors.append((d, e))
            continue
        stack += sorted(children, reverse=True)
    return found


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:      # a symlink to itself (ELOOP), a name too long to stat
        return False


def trajectory_ids(exp_dirs: list[Path]) -> list[str]:
    """One id per experiment folder: its name, unless folders with other real paths share that
    name (``A/X_on_task_1`` and ``B/X_on_task_1``); those get the shortest trailing part of their
    real path that tells them apart. The same folder reached twice keeps one id (its steps are
    then duplicates)."""
    real = [Path(os.path.realpath(d)) for d in exp_dirs]
    by_name: dict[str, set[Path]] = defaultdict(set)
    for d, r in zip(exp_dirs, real):
        by_name[d.name].add(r)
    ids = {}
    for name, paths in by_name.items():
        if len(paths) == 1:
            ids[next(iter(paths))] = name
            continue
        depth = 2
        while True:
            tails = {p: "/".join(p.parts[-depth:]) for p in paths}
            if len(set(tails.values())) == len(paths) or depth > max(len(p.parts) for p in paths):
                break
            depth += 1
        ids.update(tails)
    return [ids[r] for r in real]


def step_files(exp_dir: Path) -> list[tuple[int, Path]]:
    steps = [(int(m.group(1)), p) for p in exp_dir.iterdir() if (m := _STEP_FILE.match(p.name))]
    return sorted(steps)


def _goal_text(goal_object) -> str | None:
    if isinstance(goal_object, str):
        return goal_object.strip() or None
    if isinstance(goal_object, (list, tuple)):
        texts = [g.get("text", "") for g in goal_object if isinstance(g, dict) and g.get("type") == "text"]
        return "\n".join(t for t in texts if t).strip() or None
    return None


def _goal_from_chat(obs: dict) -> str | None:
    for msg in obs.get("chat_messages") or ():
        if isinstance(msg, dict) and msg.get("role") == "user" and msg.get("message"):
            return str(msg["message"]).strip()
    return None


def _active_url(obs: dict) -> str | None:
    urls = obs.get("open_pages_urls") or ()
    idx = obs.get("active_page_index")
    try:
        i = int(idx[0]) if hasattr(idx, "__len__") else int(idx)
        return str(urls[i])
    except (TypeError, ValueError, IndexError):
        if isinstance(obs.get("url"), str) and obs["url"]:       # BrowserGym 0.12+ also records it
            return obs["url"]
        m = _ROOT_URL.search(obs.get("axtree_txt") or "")
        return m.group(1) if m else None


def _field(obj, name: str):
    """A field of a dict (older agent_info) or of a loaded record (``AgentInfo``), else None."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, "__dict__", {}).get(name)


def _load(path: Path, max_bytes: int):
    """(object, None) or (None, (reason, detail)) for one gzip'd pickle: whatever the bytes
    hold, reading one file never raises."""
    try:
        return load_gz(path, max_bytes), None
    except UnexpectedClassError as e:
        return None, ("unexpected_class", str(e))
    except TooLargeError as e:
        return None, ("too_large", str(e))
    except NotRegularFileError as e:
        return None, ("not_regular_file", e.strerror)
    except (OSError, EOFError, zlib.error) as e:
        return None, ("corrupt_gzip", f"{type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001  (OverflowError on a huge frame length, MemoryError, ...)
        return None, ("corrupt_pickle", f"{type(e).__name__}: {_short(e)}")


def _short(e: BaseException, limit: int = 300) -> str:
    try:
        text = str(e)
    except Exception:  # noqa: BLE001
        text = repr(type(e))
    return text if len(text) <= limit else text[:limit] + "..."


def _load_step(path: Path, max_bytes: int):
    """(step object, None) or (None, (reason, detail))."""
    step, err = _load(path, max_bytes)
    if err:
        return None, err
    fields = getattr(step, "__dict__", None)
    if not isinstance(fields, dict) or isinstance(step, dict):
        return None, ("missing_field", f"not a StepInfo: {type(step).__name__} has no fields")
    missing = [f for f in ("obs", "action") if f not in fields]
    if missing:
        return None, ("missing_field", f"StepInfo has no field {', '.join(map(repr, missing))} "
                                       f"(an unknown layout; its fields: {', '.join(sorted(map(str, fields))[:20])})")
    return step, None


def _summary(exp_dir: Path, traj_id: str):
    """(summary dict, note, reject or None). A missing file is a note; one that exists but cannot
    be read (not a regular file, too large, not a JSON object, a bad reward) is one reject."""
    path = exp_dir / "summary_info.json"
    if not os.path.lexists(path):
        return {}, "summary_info.json missing", None
    reason = "corrupt_file"
    try:
        summary = json.loads(read_regular(path, MAX_SUMMARY_BYTES))
        if not isinstance(summary, dict):
            raise ValueError(f"a JSON {type(summary).__name__}, not an object")
        reward = summary.get("cum_reward")
        if reward is not None:
            float(reward)
        return summary, "", None
    except TooLargeError as e:
        reason, detail = "too_large", str(e)
    except NotRegularFileError as e:
        reason, detail = "not_regular_file", e.strerror
    except Exception as e:  # noqa: BLE001  (unreadable, not JSON, a huge number...)
        detail = f"{type(e).__name__}: {_short(e)}"
    note = f"summary_info.json unreadable: {reason}"
    return {}, note, Reject(STAGE, reason, str(path), f"summary_info.json: {detail}",
                            {"traj_id": traj_id, "file": path.name})


def read_experiment(exp_dir: Path, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_MB * 2**20,
                    traj_id: str | None = None) -> Iterator[StepRecord | Reject]:
    """The steps of one experiment directory (``traj_id``: its name unless given); each step that
    cannot be read or converted is one Reject, and so are a goal file that cannot be read (its
    steps fall back to the goal in the user's chat message) and a summary_info.json that cannot
    be read (its steps' success is then unknown)."""
    traj_id = traj_id or exp_dir.name
    m = _EXP_NAME.search(exp_dir.name)
    task_name, seed = (m.group("task"), m.group("seed")) if m else (exp_dir.name, None)
    task_id = f"{task_name}_{seed}" if seed is not None else task_name

    summary, summary_note, bad_summary = _summary(exp_dir, traj_id)
    if bad_summary:
        yield bad_summary
    reward = summary.get("cum_reward")
    success = bool(float(reward) > 0) if reward is not None else None

    goal = None
    goal_path = exp_dir / "goal_object.pkl.gz"
    if goal_path.exists():
        goal_object, err = _load(goal_path, max_bytes)
        if err:
            yield Reject(STAGE, err[0], str(goal_path), f"goal object: {err[1]}",
                         {"traj_id": traj_id, "file": goal_path.name})
        else:
            try:
                goal = _goal_text(goal_object)
            except Exception:  # noqa: BLE001  (a loaded object of an odd shape: no goal)
                goal = None

    loaded: list[tuple[int, Path, object]] = []
    for idx, path in step_files(exp_dir):
        step, err = _load_step(path, max_bytes)
        if err:
            yield Reject(STAGE, err[0], str(path), err[1], {"traj_id": traj_id, "step_idx": idx})
            continue
        obs = step.obs
        if obs is None:
            yield Reject(STAGE, "no_observation", str(path), "step has no observation (episode crashed)",
                         {"traj_id": traj_id, "step_idx": idx})
            continue
        if not isinstance(obs, dict) or "axtree_txt" not in obs:
            yield Reject(STAGE, "missing_field", str(path), "obs.axtree_txt missing",
                         {"traj_id": traj_id, "step_idx": idx})
            continue
        loaded.append((idx, path, step))

    by_idx = {idx: step for idx, _, step in loaded}
    for idx, path, step in loaded:
        key = {"traj_id": traj_id, "step_idx": idx}
        try:
            yield _convert(step, idx, path, key, by_idx, goal, success, summary, summary_note,
                           task_name, task_id, seed, traj_id, exp_dir)
        except Exception as e:  # noqa: BLE001  (one odd step never costs the others)
            yield Reject(STAGE, "bad_record", str(path), f"{type(e).__name__}: {_short(e)}", key)


def _convert(step, idx: int, path: Path, key: dict, by_idx: dict, goal, success, summary: dict, summary_note: str,
             task_name: str, task_id: str, seed, traj_id: str, exp_dir: Path) -> StepRecord | Reject:
    """One loaded step as a record, or the Reject saying why it cannot be one."""
    obs = step.obs
    axtree = obs.get("axtree_txt") or ""
    if not isinstance(axtree, str):
        return Reject(STAGE, "missing_field", str(path), f"axtree_txt is {type(axtree).__name__}", key)
    if not axtree.strip():
        return Reject(STAGE, "empty_observation", str(path), "empty AXTree", key)
    intent = goal or _goal_from_chat(obs)
    if not intent:
        return Reject(STAGE, "missing_goal", str(path), "no goal object and no user chat message", key)
    url = _active_url(obs)
    if not url:
        return Reject(STAGE, "missing_field", str(path), "no active page URL", key)
    action = thought = None
    agent_info = getattr(step, "agent_info", None)
    if step.action is not None:
        if not isinstance(step.action, str):
            return Reject(STAGE, "missing_field", str(path),
                          f"action is {type(step.action).__name__}, not the agent's text", key)
        think = _field(agent_info, "think")
        try:
            action_text, thought = action_and_thought(step.action, think if isinstance(think, str) else None)
            action = parse_action(action_text).to_string()
        except ActionParseError as e:
            return Reject(STAGE, "unparseable_action", str(path), str(e), key)
    nxt = by_idx.get(idx + 1)
    action_error = None
    if action is not None and nxt is not None and isinstance(nxt.obs, dict):
        action_error = str(nxt.obs.get("last_action_error") or "").strip() or None
    meta = {"task_name": task_name, "seed": seed, "exp_dir": str(exp_dir),
            "open_pages_urls": [str(u) for u in (obs.get("open_pages_urls") or ())],
            "model": _field(_field(agent_info, "model_info"), "model_name")
            or _field(_field(_field(agent_info, "extra_info"), "chat_model_args"), "model_name"),
            "cum_reward": summary.get("cum_reward"), "err_msg": summary.get("err_msg")}
    if summary_note:
        meta["note"] = summary_note
    return StepRecord(
        source="agentlab", site=site_of(url), task_id=task_id, traj_id=traj_id, step_idx=idx,
        intent=intent, url=url, observation=axtree, obs_format="indented",
        html=obs.get("pruned_html") if isinstance(obs.get("pruned_html"), str) and obs.get("pruned_html") else None,
        action=action, action_error=action_error,
        thought=thought or None, success=success, source_path=str(path),
        meta=json.dumps(meta, ensure_ascii=False, default=str))


def read_agentlab(inputs: list[Path], max_decompressed_mb: float = DEFAULT_MAX_DECOMPRESSED_MB
                  ) -> Iterator[StepRecord | Reject]:
    """Every experiment directory under ``inputs``; a pickle that decompresses to more than
    ``max_decompressed_mb`` is rejected (``too_large``) without being decompressed further."""
    max_bytes = int(max_decompressed_mb * 2**20)
    exp_dirs: list[Path] = []
    for root in inputs:
        errors: list = []
        try:
            exp_dirs += find_experiment_dirs(root, errors)
        except OSError as e:
            yield Reject(STAGE, "corrupt_file", str(root), f"{type(e).__name__}: {_short(e)}")
        for folder, e in errors:    # a folder that cannot be listed: its steps were never counted
            yield Reject(STAGE, "corrupt_file", str(folder), f"{type(e).__name__}: {_short(e)}")
    for exp_dir, traj_id in zip(exp_dirs, trajectory_ids(exp_dirs)):
        try:
            yield from read_experiment(exp_dir, max_bytes, traj_id)
        except OSError as e:   # the folder itself cannot be listed: its steps were never counted
            yield Reject(STAGE, "corrupt_file", str(exp_dir), f"{type(e).__name__}: {_short(e)}",
                         {"traj_id": traj_id})
