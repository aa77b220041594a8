"""File locks (``flock``) on a run directory's lock files: a non-blocking try for the stage locks
(``RunDir.lock_stage``: shared to read an output, exclusive to write it) and a blocking hold for
the short read-modify-write of ``stats.json`` and ``rejects.jsonl``.

An exclusive holder writes who it is into the lock file, so the stage that finds it busy can say
which one holds it; readers write nothing. The kernel drops a killed process's locks.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import gc
import os
from pathlib import Path

SHARED, EXCLUSIVE = fcntl.LOCK_SH, fcntl.LOCK_EX


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def holder(path: Path) -> str:
    """Who holds the lock at ``path``, as its exclusive holder wrote it; readers write nothing."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0][:200] if text else "a stage reading it"


def try_lock(path: Path, mode: int, who: str):
    """The lock file at ``path`` (created if needed), open and locked in ``mode`` (``SHARED`` or
    ``EXCLUSIVE``), or None when another holder's lock conflicts. It does not wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in (0, 1):
        f = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            if attempt == 0:
                # A failed stage of this process may still hold its lock in an unreachable object
                # (a traceback cycle): collect it and try once more.
                gc.collect()
                continue
            return None
        if mode == EXCLUSIVE:
            f.seek(0)
            f.truncate()
            f.write(f"{who} (pid {os.getpid()}) writing it since {_now()}\n")
            f.flush()
        return f
    raise AssertionError("unreachable")


def unlock(f, mode: int) -> None:
    """Release and close a lock ``try_lock`` took (an exclusive holder's name is erased first)."""
    with contextlib.suppress(OSError, ValueError):
        if mode == EXCLUSIVE:
            f.seek(0)
            f.truncate()
            f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)     # for forked workers that share the descriptor too
    with contextlib.suppress(OSError):
        f.close()


@contextlib.contextmanager
def held(path: Path):
    """An exclusive lock on ``path`` for the ``with`` block, waiting for it."""
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
