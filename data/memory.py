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
