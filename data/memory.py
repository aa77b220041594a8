"""Memory a finished piece of work freed, given back to the operating system.

A process that works through a pool in pieces (a site's graph, a chunk of rows) frees what each
piece held, but the allocators keep much of it: Arrow's pool keeps freed pages for reuse, and
glibc's heap keeps free space that sits below live blocks. So a worker's resident memory grows
with the pieces it has done, not with the largest piece (``graph.build`` at 10x the paper's pool:
321 MB after its largest site, 527 MB after 50 sites). :func:`release_memory` between pieces keeps
it near the largest piece's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa


def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None).malloc_trim
    except (OSError, AttributeError):      # not glibc (macOS, musl): nothing to trim
        return None


_TRIM = _malloc_trim()


def arrow_allocator() -> None:
    """Arrow allocates from jemalloc with freed pages returned at once (decay 0) in this process
    from now on, instead of its bundled mimalloc, which keeps freed pages per thread: a mining
    worker that reads row group after row group held 393 MB at 10x the paper's pool with mimalloc,
    247 MB with glibc's ``malloc`` (``ARROW_DEFAULT_MEMORY_POOL=system``); with jemalloc the mining
    process peaked at 275 MB against 306 with ``malloc``, its workers at 226-244 against 248-258
    (the same 10x mining, bench/RESULTS.md). Where this Arrow has no jemalloc, ``malloc``. Called by
    the stages that stream a pool."""
    if pa.default_memory_pool().backend_name == "jemalloc":
        return
    try:
        pool = pa.jemalloc_memory_pool()
        pa.jemalloc_set_decay_ms(0)
    except NotImplementedError:
        pool = pa.system_memory_pool()
    pa.set_memory_pool(pool)


def release_memory() -> None:
    """Return the free pages of Arrow's memory pool and of the C heap (glibc) to the system."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)


def fresh_python(code: str, *args: str, what: str) -> str:
    """Run ``code`` (``python -c``, with ``args`` as ``sys.argv[1:]``) in a fresh Python process and
    return what it printed: a piece of work that then starts from an empty heap instead of the
    caller's (a subprocess, not a spawned ``multiprocessing`` child, which would import the caller's
    ``__main__``: a script calling a stage without a ``__main__`` guard would fail). This checkout's
    packages come first on its path. A failure raises RuntimeError with the child's exception line
    (``what``: the work, for the message)."""
    here = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:       # the exception's line (the traceback stays in the child's stderr)
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {last}")
    return done.stdout
