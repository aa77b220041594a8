"""The LLM disk cache shared by several processes at once (Dask workers verifying shards of one
run, or two runs on one cache folder): once a key's entry exists, readers in other processes find
it whole on every read while other processes rewrite it (never a miss: a miss would be a repeated
paid call), and no temp file is left behind."""

from __future__ import annotations

import multiprocessing
import time

from llm.cache import ResponseCache

KEYS = [f"{i:064x}" for i in range(8)]
BIG = "x" * 400_000          # large enough that an in-place write would be seen half done


def _response(worker: int, round_: int) -> dict:
    return {"choices": [{"message": {"content": BIG}}], "worker": worker, "round": round_}


def _writer(root: str, worker: int, rounds: int) -> None:
    cache = ResponseCache(root)
    for r in range(rounds):
        for key in KEYS:
            cache.put(key, {"key": key}, _response(worker, r))


def _reader(root: str, seconds: float, out) -> None:
    cache = ResponseCache(root)
    found: set[str] = set()
    hits = lost = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for key in KEYS:
            got = cache.get(key)
            if got is None:
                lost += key in found          # it was there, whole, and now reads as a miss
                continue
            found.add(key)
            hits += 1
            lost += got["choices"][0]["message"]["content"] != BIG
    out.put((hits, lost))


def test_an_entry_stays_whole_for_readers_while_other_processes_rewrite_it(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    writers = [ctx.Process(target=_writer, args=(str(tmp_path), w, 15)) for w in range(2)]
    readers = [ctx.Process(target=_reader, args=(str(tmp_path), 3.0, out)) for _ in range(2)]
    for p in readers + writers:
        p.start()
    results = [out.get(timeout=120) for _ in readers]
    for p in readers + writers:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert all(hits > 0 for hits, _ in results), f"the readers saw no entry at all: {results}"
    assert sum(lost for _, lost in results) == 0, results
    cache = ResponseCache(tmp_path)
    assert all(cache.get(key)["round"] == 14 for key in KEYS)      # each key: one writer's last round, whole
    assert not list(tmp_path.rglob("*.tmp")), "temp files left behind"
