"""A run directory: one synthesis run, shared by every stage.

Every stage writes its files atomically (temp file + rename), appends its rejects with reasons
to ``rejects.jsonl`` and records ``in``, ``out`` and ``rejected`` (by reason) under its own key
in ``stats.json``, so ``in = out + rejected`` can be checked per stage.

Stages know what their inputs were: a stage's entry in ``stats.json`` holds ``fingerprints``,
the SHA-256 of the files it read (``inputs``) and of those it wrote that later stages read
(``outputs``, see ``STAGE_OUTPUTS``). Before reading, a stage calls ``RunDir.check_inputs``:
each input must be the file its producer wrote, made from the inputs that are there now (up
the chain to ``trajectories.parquet``); otherwise it refuses with ``StaleInputError``. An input
with no recorded producer is refused too (written outside a stage, or by one that was
interrupted or cleared), except ``trajectories.parquet`` in a run directory no ingest has
recorded (a hand-made one). The same call fails early when the run directory cannot be written,
and removes the temp files that a killed earlier run of the stage left behind. Re-ingesting
clears every downstream output (``RunDir.clear_downstream``).

The stage lock: ``check_inputs`` also takes an exclusive ``flock`` on each output the stage
writes (``.locks/<output>.lock``; ingest takes every stage's, since a re-ingest removes them) and
a shared one on each input it reads, and ``write_stage`` releases them once the entry records
the outputs. So the outputs and their entry change together as far as any other stage can tell:
a stage that would write what another writes or reads, or read what another writes, fails at
once with ``RunDirBusy`` (one line, exit 2 in every CLI); it does not wait. A killed stage holds
nothing (the kernel drops its locks). Readers that never refuse (``proposals.audit``) take none.
The ``flock`` calls themselves are ``data.locks``'.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data.locks import EXCLUSIVE, SHARED, held, holder, try_lock, unlock
from data.schema import int32_array
from data.state import State

# A site's folder name: the name itself when it is plain, short and cannot be mistaken for a
# digested name; else its sanitized readable part (capped in bytes) and its full SHA-256.
_SITE_NAME_MAX_BYTES = 120
_DIGESTED = re.compile(r"-[0-9a-f]{6,}\Z")


def site_dirname(site: str) -> str:
    """A file-system-safe folder name for a site, injective over all strings: the name itself when
    it is plain (letters, digits, ``._-``; lower case; not starting with a dot; at most
    120 bytes; not ending like a digest, ``-<hex>``), else ``<readable>-<sha256 hex>``, whose
    readable part is the sanitized name cut to 120 bytes. Plain names never end in ``-<hex>`` and
    digested ones always do, so the two kinds never meet, and ``a b``, ``a_b`` and
    ``a_b-fbd987`` are three folders."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in site)
    if (safe == site and safe and not safe.startswith(".") and safe == safe.lower()
            and len(safe.encode("utf-8")) <= _SITE_NAME_MAX_BYTES and not _DIGESTED.search(safe)):
        return safe
    readable = safe.lstrip(".").lower().encode("utf-8")[:_SITE_NAME_MAX_BYTES].decode("utf-8", "ignore")
    digest = hashlib.sha256(site.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{readable or 'site'}-{digest}"


class RunDirError(FileNotFoundError):
    """A run directory a stage cannot use as it is (a stale input, an unwritable folder).

    A ``FileNotFoundError`` so that every stage CLI, which already reports a missing input in
    one line with exit code 2, reports these the same way: the input that this stage needs (one
    consistent with the run's upstream files) is not there."""


class StaleInputError(RunDirError):
    """An input was written from a different upstream run (or replaced since it was written)."""


class RunDirNotWritable(RunDirError):
    """The stage could not write its outputs: checked before the work, not after it."""


class RunDirBusy(RunDirError):
    """Another stage is writing an output this stage reads or writes, or reading one it writes
    (the stage lock, see ``RunDir.check_inputs``): the second stage fails fast, it does not wait."""


# The files (or folders) each stage writes, relative to the run directory. Those that later
# stages read are fingerprinted in the stage's ``stats.json`` entry; all of them are checked for
# writability and cleaned of orphan temp files when the stage starts.
STAGE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "ingest": ("trajectories.parquet",),
    "graph.build": ("graphs",),
    "proposals.mine": ("candidates.parquet", "audit"),
    "teacher.verify": ("preferences.parquet", "discarded.parquet"),
    # dataset.export's stages keep the names they had under data/: they key the stats.json of existing runs
    "data.export.trl": ("export",),
    "data.export.trl_labels": ("export",),
    "data.export.webprmbench": ("export",),
}
_FS_IOC_GETFLAGS, _FS_IMMUTABLE_FL, _FS_APPEND_FL = 0x80086601, 0x10, 0x20     # linux/fs.h


def _inode_lock(path: Path) -> str | None:
    """'immutable' or 'append-only' when the file's inode flags (``chattr +i`` / ``+a``) forbid
    replacing it, whatever the folder's permissions; None otherwise or where flags are unknown."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4], sys.byteorder)   # an int
    except OSError:                  # a file system without inode flags
        return None
    finally:
        os.close(fd)
    return "immutable" if flags & _FS_IMMUTABLE_FL else "append-only" if flags & _FS_APPEND_FL else None


# Outputs that no later stage reads: written, but not fingerprinted.
_UNREAD_OUTPUTS = {"audit", "export"}
# Everything a run directory holds downstream of ingest (removed by a re-ingest).
DOWNSTREAM = ("graphs", "candidates.parquet", "preferences.parquet", "discarded.parquet", "export", "audit",
              "report", "README.md")
# The temp files of the atomic writers below: ``.<name>.<random>.tmp`` beside the target.
_TMP_PREFIX, _TMP_SUFFIX = ".", ".tmp"
# The stage locks: one ``flock`` file per output, in this folder of the run directory.
_LOCK_DIR = ".locks"
_ALL_OUTPUTS = tuple(dict.fromkeys(rel for outs in STAGE_OUTPUTS.values() for rel in outs))


def stage_command(stage: str) -> str:
    """The command that (re)writes a stage's outputs."""
    if stage == "ingest":
        return "python -m data.ingest"
    if stage.startswith("data.export"):
        return "python -m dataset.export"
    return f"python -m {stage}"


_FINGERPRINTS: dict[tuple, str] = {}


def _file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _FINGERPRINTS:
        with open(path, "rb") as f:
            _FINGERPRINTS[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _FINGERPRINTS[key]


def fingerprint(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes, or of a folder's files (their relative paths and
    bytes, in path order; hidden files such as temp files left out)."""
    path = Path(path)
    if path.is_dir():
        h = hashlib.sha256()
        for f in sorted(p for p in path.rglob("*") if p.is_file()
                        and not any(part.startswith(".") for part in p.relative_to(path).parts)):
            h.update(f"{f.relative_to(path).as_posix()}\0{_file_sha256(f)}\n".encode())
        return "sha256:" + h.hexdigest()
    return "sha256:" + _file_sha256(path)


def _is_orphan_tmp(name: str, target: str | None = None) -> bool:
    if target is not None:
        return name.startswith(f"{_TMP_PREFIX}{target}.") and name.endswith(_TMP_SUFFIX)
    return name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX) and name.count(".") >= 3


@dataclass(slots=True)
class Reject:
    """A record a stage dropped, with where it came from and why."""

    stage: str
    reason: str
    source: str
    detail: str = ""
    key: dict = field(default_factory=dict)   # identifying fields (traj_id, step_idx, ...)


class RejectSpool:
    """Rejects held on disk (an anonymous temp file) until the stage writes them: a stage whose
    parts (a site's) come back in another order than it writes them adds each part as it comes
    (:meth:`add`) and reads it back when its turn comes (:meth:`read`), so that its process holds
    none of them (``graph.build`` at 10x the paper's pool: 26k rejects, 17 MB)."""

    def __init__(self):
        self._file = tempfile.TemporaryFile()
        self._parts: dict[str, tuple[int, int]] = {}

    def __enter__(self) -> RejectSpool:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def add(self, part: str, rejects: Iterable[Reject]) -> None:
        if part in self._parts:
            raise ValueError(f"reject spool: part {part!r} added twice")
        f = self._file
        start = f.seek(0, os.SEEK_END)
        for r in rejects:       # as rejects.jsonl encodes them (text may hold lone surrogates)
            f.write(json.dumps([r.stage, r.reason, r.source, r.detail, r.key], default=str).encode() + b"\n")
        self._parts[part] = (start, f.tell())

    def read(self, part: str) -> Iterator[Reject]:
        """The part's rejects, as added (none for a part never added)."""
        start, end = self._parts.get(part, (0, 0))
        at = start
        while at < end:
            self._file.seek(at)
            line = self._file.readline()
            at += len(line)
            yield Reject(*json.loads(line))


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


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator:
    """A binary file to write that replaces ``path`` (flushed to disk, the umask's mode) when the
    block ends without an error; on an error ``path`` is untouched and the temp file removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{_TMP_PREFIX}{path.name}.", suffix=_TMP_SUFFIX)
    try:
        os.fchmod(fd, _umask_mode())
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def temp_beside(path: Path) -> Path:
    """A new empty temp file beside ``path`` (``.<name>.<random>.tmp``): the stage that writes
    ``path`` removes it as an orphan if a killed run left it behind (``RunDir.clean_orphans``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{_TMP_PREFIX}{path.name}.", suffix=_TMP_SUFFIX)
    os.close(fd)
    return Path(tmp)


def atomic_write_parquet(path: Path, table: pa.Table, row_group_size: int | None = None) -> None:
    with atomic_parquet_writer(path, table.schema) as writer:
        writer.write_table(table, row_group_size=row_group_size)


@contextlib.contextmanager
def atomic_parquet_writer(path: Path, schema: pa.Schema, **options) -> Iterator[pq.ParquetWriter]:
    """A ``ParquetWriter`` (zstd; ``options``: its other keywords) to a temp file that replaces
    ``path`` when the block ends without an error: written a table or row group at a time, the
    same bytes as one ``pq.write_table`` of them all."""
    tmp = temp_beside(path)
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd", **options) as writer:
            yield writer
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class RunDir:
    """Paths and bookkeeping of one run directory."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._inputs: dict[str, dict[str, str]] = {}   # stage -> the fingerprints check_inputs saw
        self._stage_locks: dict[str, dict[str, tuple]] = {}   # stage -> rel -> (lock file, mode)

    @property
    def trajectories(self) -> Path:
        return self.root / "trajectories.parquet"

    @property
    def graphs(self) -> Path:
        return self.root / "graphs"

    @property
    def graph_manifest(self) -> Path:
        return self.graphs / "manifest.json"

    @property
    def candidates(self) -> Path:
        """``candidates.parquet``: the mined pool (``proposals.mine``)."""
        return self.root / "candidates.parquet"

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
        keys = set(keys)
        trajs = {t for t, _ in keys}
        if not trajs:
            return {}
        # Read in batches; of the other steps of the keyed steps' trajectories only the action (the
        # history) and the first step's URL: a 10,000-pair sample's trajectories hold most of a
        # large pool's rows (at 10x the paper's pool, their intents and metadata cost ~70 MB).
        rows: list[tuple] = []         # (traj_id, step_idx, action, the keyed step's fields or None)
        first: dict[str, tuple[int, str]] = {}      # each trajectory's first step and its URL
        with pq.ParquetFile(self.trajectories) as f:
            for batch in f.iter_batches(batch_size=1024, columns=["traj_id", "step_idx", "url", "action"]
                                        + ["intent", "meta", "observation"]):
                ids = batch.column("traj_id").to_pylist()
                take = [i for i, t in enumerate(ids) if t in trajs]
                if not take:
                    continue
                batch = batch.take(int32_array(take))
                cols = batch.select(["traj_id", "step_idx", "url", "action"]).to_pydict()
                keyed = [i for i, k in enumerate(zip(cols["traj_id"], cols["step_idx"])) if k in keys]
                full = dict(zip(keyed, batch.select(["intent", "meta", "observation"]).take(int32_array(keyed))
                                .to_pylist())) if keyed else {}
                for i, (traj, step, url, action) in enumerate(zip(*cols.values())):
                    if traj not in first or step < first[traj][0]:
                        first[traj] = (step, url)
                    if i in full:
                        full[i]["url"] = url
                    rows.append((traj, step, action, full.get(i)))
        rows.sort(key=lambda r: (r[0], r[1]))
        out = {}
        history: list[str] = []
        for n, (traj_id, step, action, r) in enumerate(rows):
            if n == 0 or rows[n - 1][0] != traj_id:
                history = []
            if r is not None:
                try:
                    meta = json.loads(r["meta"] or "{}")
                except ValueError:
                    meta = {}
                meta = meta if isinstance(meta, dict) else {}
                start = meta.get("start_url") if isinstance(meta.get("start_url"), str) else None
                out[(traj_id, step)] = State(intent=r["intent"], axtree=r["observation"], url=r["url"],
                                             start_url=start or first[traj_id][1], history=list(history))
            if action:
                history.append(action)
        return out

    @property
    def stats_path(self) -> Path:
        return self.root / "stats.json"

    @property
    def rejects_path(self) -> Path:
        return self.root / "rejects.jsonl"

    def read_stats(self) -> dict:
        """``stats.json`` (empty when absent); RunDirError when it is not a JSON object."""
        if not self.stats_path.exists():
            return {}
        try:
            stats = json.loads(self.stats_path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as e:
            raise RunDirError(f"{self.stats_path} is unreadable ({type(e).__name__}): re-ingest to start "
                              f"the run directory afresh") from None
        if not isinstance(stats, dict):
            raise RunDirError(f"{self.stats_path} is not a JSON object: re-ingest to start the run directory afresh")
        return stats

    def write_stage(self, stats: StageStats, rejects: Iterable[Reject]) -> None:
        """Record one stage's counts and rejects, replacing what an earlier run of it wrote.

        Read-modify-write of two shared files: an exclusive lock keeps stages that finish at
        the same time (separate processes) from losing each other's entries."""
        stats.check()
        self.root.mkdir(parents=True, exist_ok=True)
        fingerprints = {}
        if self._inputs.get(stats.stage):
            fingerprints["inputs"] = self._inputs[stats.stage]
        outputs = {rel: fingerprint(self.root / rel) for rel in STAGE_OUTPUTS.get(stats.stage, ())
                   if rel not in _UNREAD_OUTPUTS and (self.root / rel).exists()}
        if outputs:
            fingerprints["outputs"] = outputs
        with self._locked():
            self._write_stage_locked(stats, rejects, fingerprints)
        # The entry now records the outputs: other stages may read (or rewrite) them.
        self.release_stage(stats.stage)

    @contextlib.contextmanager
    def _locked(self):
        """The lock of ``stats.json`` and ``rejects.jsonl``; orphan temp files of those two (only
        a holder of the lock writes them) are removed on the way in."""
        with held(self.root / ".stats.lock"):
            for name in (self.stats_path.name, self.rejects_path.name):
                self._remove_orphans(self.root, name)
            yield

    def _write_stage_locked(self, stats: StageStats, rejects: Iterable[Reject],
                            fingerprints: dict | None = None) -> None:
        self._write_rejects_locked(stats.stage, rejects)
        all_stats = self.read_stats()
        all_stats[stats.stage] = {**stats.as_dict(), **({"fingerprints": fingerprints} if fingerprints else {})}
        atomic_write_text(self.stats_path, json.dumps(all_stats, indent=2, sort_keys=True) + "\n")

    def _write_rejects_locked(self, stage: str, rejects: Iterable[Reject]) -> None:
        """``rejects.jsonl`` with ``stage``'s lines replaced by ``rejects``, streamed: the lines go
        to one temp file per stage rank, then into the new file in pipeline order (a stage's lines
        in the order it wrote them), so the file does not depend on which stage ran last (a rerun
        of graph.build after proposals.mine leaves the lines where a first run put them) and
        neither the file nor the rejects are ever held whole (issue 42: 114 MB at 10x)."""
        spools: dict[tuple, tuple[Path, object]] = {}

        def spool(rank: tuple):
            if rank not in spools:
                path = temp_beside(self.rejects_path)
                spools[rank] = (path, open(path, "w", encoding="utf-8", newline="\n"))
            return spools[rank][1]

        try:
            if self.rejects_path.exists():
                with open(self.rejects_path, encoding="utf-8", errors="replace", newline="") as f:
                    for line in f:
                        line = line.rstrip("\r\n")
                        other = _stage_of(line)      # None: a line that is not a reject (a torn write): dropped
                        if other is not None and other != stage:
                            spool(_stage_rank(other)).write(line + "\n")
            mine = None
            for r in rejects:
                mine = mine or spool(_stage_rank(stage))
                mine.write(json.dumps({"stage": r.stage, "reason": r.reason, "source": r.source, "detail": r.detail,
                                       **({"key": r.key} if r.key else {})},
                                      ensure_ascii=True, default=str) + "\n")   # ASCII: text may hold lone surrogates
            for _, f in spools.values():
                f.close()
            with atomic_file(self.rejects_path) as out:
                for rank in sorted(spools):
                    with open(spools[rank][0], "rb") as part:
                        shutil.copyfileobj(part, out, 1 << 20)
        finally:
            for path, f in spools.values():
                f.close()
                path.unlink(missing_ok=True)

    # -- stages know what their inputs were ---------------------------------------------------
    def check_writable(self, *rels: str) -> None:
        """Raise RunDirNotWritable unless the run directory (created if needed) and the existing
        output folders ``rels`` accept a new file: checked before a stage does its work."""
        where = [self.root] + [self.root / r for r in rels if (self.root / r).is_dir()]
        for d in where:
            try:
                d.mkdir(parents=True, exist_ok=True)
                fd, probe = tempfile.mkstemp(dir=d, prefix=f"{_TMP_PREFIX}write-probe.", suffix=_TMP_SUFFIX)
                os.close(fd)
                os.unlink(probe)
            except OSError as e:
                raise RunDirNotWritable(f"cannot write to {d}: {e.strerror or e}") from None
        for rel in (*rels, "stats.json"):     # a writable folder still cannot replace a locked file
            if (self.root / rel).is_file() and (flag := _inode_lock(self.root / rel)):
                raise RunDirNotWritable(f"cannot replace {self.root / rel}: it is {flag} (chattr -i / -a)")

    @staticmethod
    def _remove_orphans(folder: Path, target: str | None = None, recursive: bool = False) -> list[Path]:
        found = []
        if folder.is_dir():
            for p in (folder.rglob("*") if recursive else folder.iterdir()):
                if p.is_file() and _is_orphan_tmp(p.name, target):
                    with contextlib.suppress(OSError):
                        p.unlink()
                        found.append(p)
        return found

    def clean_orphans(self, stage: str) -> list[Path]:
        """Remove the temp files that a killed run of ``stage`` left beside (or inside) its
        outputs; returns them. Call at the start of the stage (two runs of one stage in one run
        directory at once are not supported anyway)."""
        removed = []
        for rel in STAGE_OUTPUTS.get(stage, ()):
            path = self.root / rel
            removed += self._remove_orphans(path.parent, path.name)
            if path.is_dir():
                removed += self._remove_orphans(path, recursive=True)
        return removed

    def _producer(self, stats: dict, rel: str) -> str | None:
        for stage, entry in stats.items():
            if isinstance(entry, dict) and rel in ((entry.get("fingerprints") or {}).get("outputs") or {}):
                return stage
        return None

    def _rel(self, path: str | os.PathLike) -> str:
        path = Path(path)
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def _check_chain(self, stats: dict, rel: str, seen: set[str]) -> None:
        """``rel`` is the file its producer recorded, and every input the producer recorded
        (up the chain) is the file that is there now; a file no stage recorded (hand-made, or a
        run directory written before fingerprints) is taken as it is."""
        if rel in seen:
            return
        seen.add(rel)
        producer = self._producer(stats, rel)
        if producer is None:
            if rel == "trajectories.parquet" and "ingest" not in stats:
                return      # a hand-made run directory: its root file is taken as it is
            maker = next((st for st, outs in STAGE_OUTPUTS.items() if rel in outs), None)
            raise StaleInputError(
                f"{self.root / rel} has no recorded producer in {self.stats_path.name} (written outside a stage, "
                f"or by one that was interrupted or cleared since)"
                + (f"; rerun `{stage_command(maker)}`" if maker else ""))
        fps = stats[producer]["fingerprints"]
        now = fingerprint(self.root / rel)
        if fps["outputs"][rel] != now:
            raise StaleInputError(
                f"{self.root / rel} is not the file {producer} wrote in this run directory (it was replaced "
                f"or changed since: {fps['outputs'][rel][:19]} recorded, {now[:19]} now); rerun "
                f"`{stage_command(producer)}`")
        for up, recorded in sorted((fps.get("inputs") or {}).items()):
            if not (self.root / up).exists():
                continue
            current = fingerprint(self.root / up)
            if current != recorded:
                raise StaleInputError(
                    f"{self.root / rel} was written by {producer} from a different {up} (another upstream "
                    f"run: {recorded[:19]} then, {current[:19]} now); rerun `{stage_command(producer)}` "
                    f"and the stages after it")
            self._check_chain(stats, up, seen)

    def check_inputs(self, stage: str, *inputs: str | os.PathLike) -> dict[str, str]:
        """Call where ``stage`` starts reading ``inputs`` (files or folders of this run
        directory; missing ones are left for the stage to report). Fails early when the run
        directory or the stage's output folders cannot be written (RunDirNotWritable); takes the
        stage lock (exclusive on the stage's outputs, shared on its inputs; RunDirBusy at once
        when another stage holds a conflicting one; released by ``write_stage``); removes the
        orphan temp files of the stage's outputs; refuses inputs written from a different
        upstream run, or with no recorded producer (StaleInputError); and remembers their
        fingerprints, which ``write_stage`` records in the stage's ``stats.json`` entry. Returns
        them (relative path -> fingerprint)."""
        self.check_writable(*STAGE_OUTPUTS.get(stage, ()))
        self.lock_stage(stage, *inputs)
        try:
            self.clean_orphans(stage)
            stats = self.read_stats() if inputs else {}
            seen: dict[str, str] = {}
            for p in inputs:
                rel = self._rel(p)
                if not (self.root / rel).exists():
                    continue
                self._check_chain(stats, rel, set())
                seen[rel] = fingerprint(self.root / rel)
        except BaseException:
            self.release_stage(stage)
            raise
        self._inputs[stage] = seen
        return seen

    # -- the stage lock ------------------------------------------------------------------------
    def _lock_path(self, rel: str) -> Path:
        return self.root / _LOCK_DIR / f"{rel}.lock"

    def lock_stage(self, stage: str, *inputs: str | os.PathLike) -> None:
        """Take ``stage``'s locks: exclusive on each output it writes (ingest: on every stage's
        outputs, which a re-ingest removes), shared on each input it reads. ``flock`` locks on
        ``.locks/<output>.lock`` in the run directory, held until ``write_stage`` (or until the
        process ends: a killed stage holds nothing). Raises RunDirBusy, in one line, when another
        stage holds a conflicting lock; this stage then holds none."""
        outputs = _ALL_OUTPUTS if stage == "ingest" else STAGE_OUTPUTS.get(stage, ())
        wanted: dict[str, int] = {}
        for p in inputs:
            rel = self._rel(p).split("/", 1)[0]
            if rel and not Path(rel).is_absolute() and rel not in (".", ".."):
                wanted[rel] = SHARED
        for rel in outputs:
            wanted[rel] = EXCLUSIVE
        taken = self._stage_locks.setdefault(stage, {})
        try:
            for rel, mode in sorted(wanted.items()):
                if rel in taken and (taken[rel][1] == EXCLUSIVE or mode == SHARED):
                    continue
                taken[rel] = (self._acquire(rel, mode, stage), mode)
        except BaseException:
            self.release_stage(stage)
            raise

    def _acquire(self, rel: str, mode: int, stage: str):
        path = self._lock_path(rel)
        f = try_lock(path, mode, stage)
        if f is None:
            raise RunDirBusy(f"{self.root / rel} is in use by another stage ({holder(path)}); "
                             f"{stage} does not wait: run it again when that one has finished, "
                             f"or use another run directory") from None
        return f

    def release_stage(self, stage: str) -> None:
        """Release ``stage``'s locks (``write_stage`` does, once the entry is recorded)."""
        for f, mode in self._stage_locks.pop(stage, {}).values():
            unlock(f, mode)

    def clear_downstream(self, keep: str = "ingest") -> list[str]:
        """Remove every output downstream of ingest (``DOWNSTREAM``; ``README.md`` only when it
        is this project's dataset card), the other stages' ``stats.json`` entries and rejects
        lines, and the orphan temp files at the top of the run directory; returns what was
        removed (relative paths, plus ``stats.json:<stage>`` per entry)."""

        removed = []
        if not (self.stats_path.exists() or self.trajectories.exists()):
            return removed          # not a used run directory: nothing here is a stage's output
        for rel in DOWNSTREAM:
            path = self.root / rel
            if rel == "README.md" and not (path.is_file() and _is_card(path)):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
                removed.append(rel + "/")
            elif path.exists() or path.is_symlink():
                path.unlink()
                removed.append(rel)
        removed += [p.name for p in self._remove_orphans(self.root)]
        if self.stats_path.exists() or self.rejects_path.exists():
            with self._locked():
                try:
                    stats = self.read_stats()
                except RunDirError:
                    stats = None
                gone = sorted(k for k in stats if k != keep) if stats is not None else []
                if stats is None or gone:
                    kept_stats = {k: v for k, v in (stats or {}).items() if k == keep}
                    atomic_write_text(self.stats_path, json.dumps(kept_stats, indent=2, sort_keys=True) + "\n")
                    removed += [f"stats.json:{k}" for k in gone] if stats is not None else ["stats.json (unreadable)"]
                if self.rejects_path.exists():
                    lines = [ln for ln in self.rejects_path.read_text(encoding="utf-8", errors="replace").splitlines()
                             if ln.strip()]
                    kept = [ln for ln in lines if _stage_of(ln) == keep]
                    if len(kept) != len(lines):
                        atomic_write_text(self.rejects_path, "".join(ln + "\n" for ln in kept))
                        removed.append(f"rejects.jsonl:{len(lines) - len(kept)} lines")
        return removed


_PIPELINE = tuple(STAGE_OUTPUTS)


def _stage_rank(stage: str | None) -> tuple[int, str]:
    """Where a stage's rejects go in ``rejects.jsonl``: pipeline order (``STAGE_OUTPUTS``), then others by name."""
    return (_PIPELINE.index(stage), "") if stage in _PIPELINE else (len(_PIPELINE), stage or "")


def _stage_of(line: str) -> str | None:
    try:
        stage = json.loads(line).get("stage")
    except (ValueError, AttributeError, RecursionError):
        return None
    return stage if isinstance(stage, str) else None


def _is_card(path: Path) -> bool:
    """This project's dataset card (``dataset.card``): YAML front matter tagged ``surfprm``."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith("---\n") and "\n- surfprm\n" in head
