"""Memory a finished piece of work freed, given back to the operating system.

A process that works through a pool in pieces (a site's graph, a chunk of rows) frees what each
piece held, but the allocators keep much of it: Arrow's pool keeps freed pages for reuse, and
glibc's heap keeps free space that sits below live blocks. So a worker's resident memory grows
with the pieces it has done, not with the largest piece (``graph.build`` at 10x the paper's pool:
321 MB after its largest site, 527 MB after 50 sites). :func:`release_memory` between pieces keeps
it near the largest piece's.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import multiprocessing
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
    the stages that stream a pool.

    ``pyarrow.set_memory_pool`` reaches what Python asks of Arrow, not what Arrow's C++ takes from
    its own default (the Parquet reader's and writer's buffers): that default is fixed when pyarrow
    is imported, from ``ARROW_DEFAULT_MEMORY_POOL``. So the variable is set too (unless the user set
    it), for the processes started from here on (``fresh_processes``', ``fresh_python``'s): a
    10x site's build peaked at 217 MB with jemalloc under Parquet, 230 with mimalloc."""
    try:
        pool = pa.jemalloc_memory_pool()
        pa.jemalloc_set_decay_ms(0)
    except NotImplementedError:
        pool = pa.system_memory_pool()
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", pool.backend_name)
    if pa.default_memory_pool().backend_name != pool.backend_name:
        pa.set_memory_pool(pool)


def release_memory() -> None:
    """Return the free pages of Arrow's memory pool and of the C heap (glibc) to the system."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)


@contextlib.contextmanager
def held_heap(threshold: int = 10_000):
    """The cycle collector during a phase that holds a large heap of long-lived objects and makes
    many short-lived ones (the teacher's requests, over the states and prompts it read): what is
    alive on entry is frozen (``gc.freeze``: no collection scans it again) and a collection runs
    every ``threshold`` allocations rather than 700. In the teacher's stage at the paper's scale,
    1.0 s of collections (eight full ones of up to 89 ms, on the event loop) became 0.26 s.
    Restored on exit; the frozen objects are collected as usual from then on. Inside another such
    block (or wherever objects are frozen already) it freezes and unfreezes nothing."""
    old = gc.get_threshold()
    owner = gc.get_freeze_count() == 0
    if owner:
        gc.freeze()
    gc.set_threshold(threshold, old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        if owner:
            gc.unfreeze()


@contextlib.contextmanager
def fresh_processes(preload: list[str], tasks_per_process: int | None = 1):
    """Work in fresh processes: yields ``imap(fn, items, workers)``, ``multiprocessing``'s ordered
    ``imap`` over a pool of ``workers`` processes, each running ``tasks_per_process`` tasks (None:
    any number) before a fresh one takes its place. They are forked from a server process that has
    imported ``preload`` and nothing of the caller (its heap, its plan, its Arrow allocator: Arrow's
    default for Parquet is fixed at import, see :func:`arrow_allocator`). The server starts
    importing when the block is entered, the pool when ``imap`` is first called: enter the block
    before the work that plans the tasks, and the two overlap.

    A worker that builds piece after piece keeps what each piece's allocations fragmented:
    ``graph.build`` at 10x the paper's pool, a worker's peak grew from 242 MB at its first site to
    330 MB by its 25th although its live objects did not grow; a fresh process starts again from
    the imports (what they left undone, each process does again: keep them in ``preload``). Where
    there is no fork server (Windows), the processes are spawned. A task's function and arguments
    must be importable and picklable, and it sees none of the caller's changes to module globals."""
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    server = None
    if method == "forkserver":
        from multiprocessing import forkserver
        server = forkserver._forkserver       # the module's server (private: checked for)
        if getattr(server, "_forkserver_pid", 0) is not None or not hasattr(server, "_stop"):
            server = None      # one this process started before: left running
        ctx.set_forkserver_preload(preload)
        if server is not None:
            server.ensure_running()      # returns at once: the server imports while the caller plans
    pool = None

    def imap(fn, items, workers: int):
        nonlocal pool
        if pool is None:
            pool = ctx.Pool(workers, maxtasksperchild=tasks_per_process)
        return pool.imap(fn, items)
    try:
        yield imap
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        if server is not None:
            # Stopped and waited for: its workers' CPU time then counts as this process's children's
            # (``time``, ``getrusage``); a server left running is never waited for.
            server._stop()


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
