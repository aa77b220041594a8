"""Mining's spools: what each chunk of trajectories writes as it is mined, and the merge of them
into ``candidates.parquet``, so that no process holds the pool.

A chunk (``proposals.pool.mine_chunk``) writes the rows of every step whose negatives are final
(no LLM fill value to wait for: the pool's great majority) to a Parquet file, and its rejects to two
JSON-lines files, in trajectory order; only the steps waiting for fill values travel back as
pending negatives. The parent then sorts the pool by ``pair_id`` from that one light column and
writes ``candidates.parquet`` a row group at a time, each gathered from the spools
(:func:`write_sorted`). The spools live in a temporary folder of the run directory (shared with Dask
workers, which read the trajectories from it too), removed when the stage ends.
"""

from __future__ import annotations

import heapq
import json
import shutil
import tempfile
import uuid
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data.memory import arrow_allocator, fresh_python, release_memory
from data.rundir import Reject, atomic_parquet_writer
from data.schema import CANDIDATE_SCHEMA
from graph.schema import pinned_table

BATCH = 4096        # rows a chunk converts and writes at once, and the merge reads at once


@contextmanager
def spool_dir(run_root: Path):
    """A temporary folder of the run directory for one mining's spools, removed afterwards; the
    folders a killed mining left are removed first (the caller holds the stage's lock, so none is
    in use)."""
    for stale in Path(run_root).glob(".mine-spool-*"):
        shutil.rmtree(stale, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=".mine-spool-", dir=run_root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class ChunkSpool:
    """One chunk's files: its final candidate rows (Parquet) and its rejects (JSON lines)."""

    def __init__(self, directory: str | Path, batch: int | None = None):
        """``batch``: rows converted and written at a time (default ``BATCH``)."""
        self.batch = batch or BATCH
        name = Path(directory) / uuid.uuid4().hex
        self.files = {"rows": f"{name}.rows.parquet", "step_rejects": f"{name}.steps.jsonl",
                      "rejects": f"{name}.rejects.jsonl"}
        self.n_rows = 0
        self._rows: list[dict] = []
        self._writer: pq.ParquetWriter | None = None
        for kind in ("step_rejects", "rejects"):
            Path(self.files[kind]).touch()

    def add_row(self, row: dict) -> None:
        self._rows.append(row)
        if len(self._rows) == self.batch:
            self._flush()

    def add_rejects(self, step_rejects: list[Reject], rejects: list[Reject]) -> None:
        """Append, in order (the lists are emptied)."""
        for kind, records in (("step_rejects", step_rejects), ("rejects", rejects)):
            if records:
                with open(self.files[kind], "a", encoding="utf-8") as f:
                    f.writelines(_reject_line(r) for r in records)
                records.clear()

    def close(self) -> dict:
        """The files written (``rows``: None when the chunk kept no final row)."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
        return {**self.files, "rows": self.files["rows"] if self.n_rows else None}

    def _flush(self) -> None:
        if not self._rows:
            return
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.files["rows"], CANDIDATE_SCHEMA)
        self._writer.write_table(pinned_table(self._rows, CANDIDATE_SCHEMA))
        self.n_rows += len(self._rows)
        self._rows.clear()


def _reject_line(r: Reject) -> str:
    return json.dumps([r.stage, r.reason, r.source, r.detail, r.key], ensure_ascii=False) + "\n"


def read_rejects(path: str) -> Iterator[Reject]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield Reject(*json.loads(line))


def merged_rejects(spools: list[dict], kind: str) -> Iterator[Reject]:
    """The chunks' rejects of ``kind`` in trajectory order, as a one-process run lists them (each
    chunk's are in that order, and a trajectory is mined by one chunk)."""
    return heapq.merge(*(read_rejects(s[kind]) for s in spools), key=lambda r: r.key["traj_id"])


def _batches(sources: list, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of the sources (spooled Parquet files, or tables) in order, a batch at a time."""
    for src in sources:
        if isinstance(src, pa.Table):
            yield from src.select(columns or src.column_names).to_batches(BATCH)
        else:
            with pq.ParquetFile(src) as f:
                yield from f.iter_batches(BATCH, columns=columns)


def light_columns(sources: list, columns: list[str]) -> pa.Table:
    """``columns`` of every source's rows, in order (the merge's plan: a few narrow columns)."""
    return pa.Table.from_batches(list(_batches(sources, columns)),
                                 schema=pa.schema([CANDIDATE_SCHEMA.field(c) for c in columns])).combine_chunks()


def _int64(values: Iterable[int]) -> pa.Array:
    buf = array("q", values)
    return pa.Array.from_buffers(pa.int64(), len(buf), [None, pa.py_buffer(buf)])


def write_sorted(path: Path, sources: list, order: array, sampled: set[int], group_rows: int) -> None:
    """Write the sources' rows at ``order`` (global row indices, in output order) to ``path``,
    ``group_rows`` rows a row group, with ``sampled`` true at the output positions in ``sampled``.
    Each source is read once for a row group and only its rows for the group kept; the group is
    then put in order a column at a time, each column's pieces freed as it is built (what is held:
    about the group once, not its pieces, its rows taken and the table again); a row group is the
    same table that converting those rows at once would give (same bytes)."""
    counts = [_count(s) for s in sources]
    rank = array("q", [-1]) * sum(counts)
    for pos, i in enumerate(order):
        rank[i] = pos
    n = len(order)
    chosen = _int64(sorted(sampled))
    with atomic_parquet_writer(path, CANDIDATE_SCHEMA) as writer:
        if n == 0:
            writer.write_table(CANDIDATE_SCHEMA.empty_table())
        for lo in range(0, n, group_rows):
            hi = min(lo + group_rows, n)
            picks, positions, offset = [], array("q"), 0
            for count in counts:      # each source's rows in this group, and their output positions
                ranks = rank[offset:offset + count]
                offset += count
                keep = [j for j, r in enumerate(ranks) if lo <= r < hi]
                picks.append(_int64(keep) if keep else None)
                positions.extend(ranks[j] - lo for j in keep)
            where = array("q", [0]) * len(positions)
            for j, p in enumerate(positions):
                where[p] = j
            where_arr = _int64(where)
            # each source read once for the group, its rows for the group kept column by column
            pieces: list[list] = [[] for _ in CANDIDATE_SCHEMA]
            for src, keep in zip(sources, picks):
                if keep is not None:
                    for k, column in enumerate(_read(src).take(keep).columns):
                        pieces[k].append(column)
            columns = []
            for field, parts in zip(CANDIDATE_SCHEMA, pieces):
                if field.name == "sampled":
                    columns.append(pc.is_in(_int64(range(lo, hi)), value_set=chosen))
                else:
                    columns.append(pa.chunked_array([c for part in parts for c in part.chunks], field.type)
                                   .take(where_arr).combine_chunks())
                parts.clear()
            writer.write_table(pa.Table.from_arrays(columns, schema=CANDIDATE_SCHEMA))
            del columns
            release_memory()


def write_sorted_apart(path: Path, sources: list, order: array, sampled: set[int], group_rows: int,
                       scratch: Path | None) -> None:
    """:func:`write_sorted`, in a fresh Python process (``data.memory.fresh_python``) when the pool
    spans more than one row group: each group gathered and written costs the writing process
    about three times the group's size (at 10x the paper's pool, +70-95 MB over the 196 MB the
    mining process held before the merge). The order and the sample go to files in ``scratch``
    (the mining's spool folder); sources in memory, or no ``scratch``: merged in this process. The
    same bytes either way (test)."""
    if len(order) <= group_rows or scratch is None or any(isinstance(src, pa.Table) for src in sources):
        write_sorted(path, sources, order, sampled, group_rows)
        return
    spec = {"path": str(path), "sources": [str(src) for src in sources], "group_rows": group_rows,
            "order": str(scratch / "merge-order.bin"), "sampled": str(scratch / "merge-sampled.bin")}
    Path(spec["order"]).write_bytes(order.tobytes())
    Path(spec["sampled"]).write_bytes(array("q", sorted(sampled)).tobytes())
    (scratch / "merge.json").write_text(json.dumps(spec))
    fresh_python("import sys; from proposals.spool import write_sorted_from; write_sorted_from(sys.argv[1])",
                 str(scratch / "merge.json"), what=f"writing {Path(path).name}")


def write_sorted_from(spec_path: str) -> None:
    """:func:`write_sorted` from the files :func:`write_sorted_apart` wrote (in its fresh process)."""
    arrow_allocator()
    spec = json.loads(Path(spec_path).read_text())
    order, sampled = array("q"), array("q")
    order.frombytes(Path(spec["order"]).read_bytes())
    sampled.frombytes(Path(spec["sampled"]).read_bytes())
    write_sorted(Path(spec["path"]), spec["sources"], order, set(sampled), spec["group_rows"])


def _read(src) -> pa.Table:
    if isinstance(src, pa.Table):
        return src
    with pq.ParquetFile(src) as f:
        return f.read()


def _count(src) -> int:
    if isinstance(src, pa.Table):
        return src.num_rows
    with pq.ParquetFile(src) as f:
        return f.metadata.num_rows


def out_by_rule(light: pa.Table, keep: pa.Array | None = None) -> Counter:
    """How many of the written rows each rule kept."""
    rules = light.column("rule") if keep is None else light.column("rule").take(keep)
    counts = pc.value_counts(rules)
    return Counter(dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist())))
