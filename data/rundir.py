"""A run directory: one synthesis run, shared by every stage.

Every stage writes its files atomically (temp file + rename), appends its rejects with reasons
to ``rejects.jsonl`` and records ``in``, ``out`` and ``rejected`` (by reason) under its own key
in ``stats.json``, so ``in = out + rejected`` can be checked per stage.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from data.judgment import State


def site_dirname(site: str) -> str:
    """A file-system-safe folder name for a site: the name itself when it is safe, else a
    sanitized name with a short hash (so 'a b' and 'a_b' stay apart and '..' cannot escape)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in site)
    if safe == site and safe and not safe.startswith("."):
        return safe
    digest = hashlib.blake2b(site.encode("utf-8", "surrogatepass"), digest_size=3).hexdigest()
    return f"{safe.lstrip('.') or 'site'}-{digest}"


@dataclass(slots=True)
class Reject:
    """A record a stage dropped, with where it came from and why."""

    stage: str
    reason: str
    source: str
    detail: str = ""
    key: dict = field(default_factory=dict)   # identifying fields (traj_id, step_idx, ...)


@dataclass(slots=True)
class StageStats:
    """Counts of one stage; ``in = out + rejected`` is checked before it is written."""

    stage: str
    n_in: int = 0
    n_out: int = 0
    rejected: Counter = field(default_factory=Counter)
    extra: dict = field(default_factory=dict)

    def check(self) -> None:
        total = self.n_out + sum(self.rejected.values())
        if total != self.n_in:
            raise AssertionError(f"{self.stage}: in={self.n_in} != out={self.n_out} + rejected={total - self.n_out}")

    def as_dict(self) -> dict:
        return {"in": self.n_in, "out": self.n_out, "rejected": dict(sorted(self.rejected.items())),
                **self.extra}

    def summary(self) -> str:
        rej = sum(self.rejected.values())
        by = ", ".join(f"{k}={v}" for k, v in sorted(self.rejected.items()))
        return f"[{self.stage}] in={self.n_in} out={self.n_out} rejected={rej}" + (f" ({by})" if by else "")


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _umask_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_parquet(path: Path, table: pa.Table, row_group_size: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd", row_group_size=row_group_size)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunDir:
    """Paths and bookkeeping of one run directory."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @property
    def trajectories(self) -> Path:
        return self.root / "trajectories.parquet"

    @property
    def graphs(self) -> Path:
        return self.root / "graphs"

    @property
    def graph_manifest(self) -> Path:
        return self.graphs / "manifest.json"

    def graph_dir(self, site: str) -> Path:
        """``graphs/<site>/``: one site's Interaction Element Graph (``nodes``, ``edges``, ``steps``)."""
        return self.graphs / site_dirname(site)

    def states(self, keys) -> dict[tuple[str, int], State]:
        """The judged states ``s_t`` of ``(traj_id, step_idx)`` keys from ``trajectories.parquet``:
        intent, observation, URL, start URL (the row's own ``meta.start_url`` when it has one, as
        WebPRM Collection rows do, else the trajectory's first URL) and the actions of the
        trajectory's earlier rows. (WebPRM rows' own ``action_history`` is not used: in the shared
        samples it holds more actions than the step has predecessors, the task's later ones
        included.) Keys whose step is not in the file are left out."""
        import json

        from data.judgment import State

        keys = set(keys)
        trajs = sorted({t for t, _ in keys})
        if not trajs:
            return {}
        rows = pq.read_table(self.trajectories, columns=["traj_id", "step_idx", "intent", "url", "observation",
                                                         "action", "meta"],
                             filters=[("traj_id", "in", trajs)]).to_pylist()
        by_traj: dict[str, list[dict]] = {}
        for r in sorted(rows, key=lambda r: (r["traj_id"], r["step_idx"])):
            by_traj.setdefault(r["traj_id"], []).append(r)
        out = {}
        for traj_id, steps in by_traj.items():
            history = []
            for r in steps:
                if (traj_id, r["step_idx"]) in keys:
                    try:
                        meta = json.loads(r["meta"] or "{}")
                    except ValueError:
                        meta = {}
                    meta = meta if isinstance(meta, dict) else {}
                    start = meta.get("start_url") if isinstance(meta.get("start_url"), str) else None
                    out[(traj_id, r["step_idx"])] = State(
                        intent=r["intent"], axtree=r["observation"], url=r["url"],
                        start_url=start or steps[0]["url"], history=list(history))
                if r["action"]:
                    history.append(r["action"])
        return out

    @property
    def stats_path(self) -> Path:
        return self.root / "stats.json"

    @property
    def rejects_path(self) -> Path:
        return self.root / "rejects.jsonl"

    def read_stats(self) -> dict:
        if self.stats_path.exists():
            return json.loads(self.stats_path.read_text())
        return {}

    def write_stage(self, stats: StageStats, rejects: list[Reject]) -> None:
        """Record one stage's counts and rejects, replacing what an earlier run of it wrote.

        Read-modify-write of two shared files: an exclusive lock keeps stages that finish at
        the same time (separate processes) from losing each other's entries."""
        stats.check()
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".stats.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._write_stage_locked(stats, rejects)

    def _write_stage_locked(self, stats: StageStats, rejects: list[Reject]) -> None:
        kept = []
        if self.rejects_path.exists():
            for line in self.rejects_path.read_text().splitlines():
                if line.strip() and json.loads(line).get("stage") != stats.stage:
                    kept.append(line)
        kept += [json.dumps({"stage": r.stage, "reason": r.reason, "source": r.source,
                             "detail": r.detail, **({"key": r.key} if r.key else {})}, ensure_ascii=False)
                 for r in rejects]
        atomic_write_text(self.rejects_path, "".join(line + "\n" for line in kept))
        all_stats = self.read_stats()
        all_stats[stats.stage] = stats.as_dict()
        atomic_write_text(self.stats_path, json.dumps(all_stats, indent=2, sort_keys=True) + "\n")
