"""Ingest demonstration trajectories into a run directory.

    python -m data.ingest --source agentlab --input ~/agentlab_results --out runs/demo
    python -m data.ingest --source webprm --input webprm_rows.jsonl --out runs/webprm
    python -m data.ingest --source canonical --input data/bundled/agentlab_workarena.parquet --out runs/demo

Writes ``trajectories.parquet`` (one row per observation, pinned schema), ``rejects.jsonl``
(every dropped record with its source and reason) and the ``ingest`` entry of ``stats.json``.
Every record is decoded on its own: one that cannot be read is a counted reject, never the end
of the run. Re-ingesting into a used run directory removes every downstream output (graphs,
candidates, preferences, exports, audit, report, card, their stats and rejects) and says so.
Exits non-zero only when nothing could be ingested.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from cli.config import Configurable, make_parser
from cli.errors import error_exit
from data.loss import stage_loss_line
from data.readers.agentlab import read_agentlab
from data.readers.canonical import read_canonical
from data.readers.safe_pickle import DEFAULT_MAX_DECOMPRESSED_MB
from data.readers.webprm import read_webprm
from data.rundir import Reject, RunDir, RunDirError, StageStats, atomic_parquet_writer, temp_beside
from data.schema import (
    ROW_GROUP_SIZE,
    STATISTICS_COLUMNS,
    STORAGE_ORDER,
    TRAJECTORY_SCHEMA,
    StepRecord,
    check_record,
    for_storage,
    steps_to_table,
)

READERS = {"agentlab": read_agentlab, "webprm": read_webprm, "canonical": read_canonical}
STAGE = "ingest"
# Text the ingest holds before it sorts and spills it to a temp file (the pool itself is never held);
# the merge reads the spills MERGE_BATCH rows at a time. Measured on the paper-scale pool (bench/
# RESULTS.md, "Ingest's memory"): 32 MB keeps the peak flat from 1x to 10x (464 -> 507 MB); 64 MB
# gave 537 -> 712 MB, 128 MB 784 -> 954 MB.
SPOOL_BYTES = 32 * 2**20
MERGE_BATCH = 16


def ingest(source: str, inputs: Iterable[str | Path], out: str | Path,
           max_decompressed_mb: float = DEFAULT_MAX_DECOMPRESSED_MB, quiet: bool = False) -> StageStats:
    """Read ``inputs`` with the ``source`` reader and write the run directory ``out``.

    ``max_decompressed_mb`` caps what one AgentLab pickle may decompress to (larger ones are
    rejected as ``too_large`` without being decompressed further). Over a used run directory,
    the downstream outputs are removed (listed in the stage's ``cleared``; printed unless
    ``quiet``)."""
    if source not in READERS:
        raise ValueError(f"unknown source {source!r}; choose from {sorted(READERS)}")
    problem = _mb_problem(max_decompressed_mb)
    if problem:
        raise ValueError(f"max_decompressed_mb {problem}")
    paths = [Path(p) for p in inputs]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"input not found: {', '.join(missing)}")
    run = RunDir(out)
    run.check_inputs(STAGE)     # writable before the work; orphan temp files of a killed ingest removed
    reader = READERS[source]
    items = reader(paths, max_decompressed_mb) if source == "agentlab" else reader(paths)
    stats = StageStats(STAGE)
    rejects: list[Reject] = []
    seen: set[tuple[str, int]] = set()
    trajs: set[str] = set()
    successful: set[str] = set()
    sites: set[str] = set()
    with _SortedSpool(run.trajectories) as spool:
        for item in items:
            stats.n_in += 1
            if not isinstance(item, Reject):
                problem = check_record(item)
                key = {"traj_id": str(item.traj_id), "step_idx": str(item.step_idx)}
                if problem:
                    item = Reject(STAGE, problem[0], str(item.source_path), problem[1], key)
                elif (item.traj_id, item.step_idx) in seen:
                    # Overlapping inputs (a folder and a run inside it) must not double a step.
                    item = Reject(STAGE, "duplicate_step", item.source_path,
                                  f"{item.traj_id} step {item.step_idx} already read", key)
                else:
                    seen.add((item.traj_id, item.step_idx))
            if isinstance(item, Reject):
                rejects.append(item)
                stats.rejected[item.reason] += 1
            else:
                stats.n_out += 1
                trajs.add(item.traj_id)
                sites.add(item.site)
                if item.success:
                    successful.add(item.traj_id)
                spool.add(item)
        # The new trajectories make every later output stale: remove them before they are replaced.
        cleared = run.clear_downstream()
        if cleared and not quiet:
            print(f"re-ingesting over a used run directory: removed {', '.join(cleared)} "
                  f"(rerun the later stages; the LLM cache still serves their requests)", file=sys.stderr)
        stats.extra = {"source": source, "inputs": [str(p) for p in paths], "trajectories": len(trajs),
                       "successful_trajectories": len(successful), "sites": sorted(sites),
                       **({"max_decompressed_mb": max_decompressed_mb} if source == "agentlab" else {}),
                       **({"cleared": cleared} if cleared else {})}
        spool.write()
    run.write_stage(stats, rejects)
    return stats


class _SortedSpool:
    """The accepted records, written to ``target`` in storage order (``STORAGE_ORDER``) without
    holding the pool: records are buffered up to ``SPOOL_BYTES`` of text, each full buffer sorted
    and spilled as a temp Arrow file beside ``target`` (``.<name>.<random>.tmp``: a killed
    ingest's are removed by the next one), and :meth:`write` merges the spills row group by row
    group into ``target`` (atomically, statistics of ``STATISTICS_COLUMNS`` only: byte-identical to
    sorting the whole table at once, since (traj_id, step_idx) is unique, so the order has no ties)."""

    def __init__(self, target: Path):
        self.target = target
        self.buffer: list[StepRecord] = []
        self.buffered = 0
        self.spills: list[Path] = []
        self.n_rows = 0

    def __enter__(self) -> _SortedSpool:
        return self

    def __exit__(self, *exc) -> None:
        for path in self.spills:
            path.unlink(missing_ok=True)

    def add(self, rec: StepRecord) -> None:
        self.buffer.append(rec)
        self.n_rows += 1
        self.buffered += len(rec.observation) + len(rec.html or "") + 512
        if self.buffered >= SPOOL_BYTES:
            self._spill()

    def _spill(self) -> None:
        table = for_storage(steps_to_table(self.buffer))
        self.buffer, self.buffered = [], 0
        path = temp_beside(self.target)
        self.spills.append(path)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, TRAJECTORY_SCHEMA) as writer:
            writer.write_table(table, max_chunksize=MERGE_BATCH)

    def _sorted_groups(self) -> Iterator[pa.Table]:
        """The records in storage order, ``ROW_GROUP_SIZE`` rows at a time."""
        if not self.spills:          # everything fits in one buffer: sort it here
            table = for_storage(steps_to_table(self.buffer))
            self.buffer = []
            for start in range(0, max(table.num_rows, 1), ROW_GROUP_SIZE):   # no rows: one empty group
                yield table.slice(start, ROW_GROUP_SIZE)
            return
        if self.buffer:
            self._spill()
        # Read, not memory-mapped: the pages of a mapped spill stay in the RSS until the merge ends.
        readers = [pa.ipc.open_file(pa.OSFile(str(p))) for p in self.spills]
        merged = heapq.merge(*(_keyed_rows(r, i) for i, r in enumerate(readers)))
        while group := list(itertools.islice(merged, ROW_GROUP_SIZE)):
            parts, (*_, batch, start) = [], group[0]
            end = start
            for *_, b, row in group:          # runs of consecutive rows of one batch: one slice each
                if b is batch and row == end:
                    end += 1
                    continue
                parts.append(batch.slice(start, end - start))
                batch, start, end = b, row, row + 1
            parts.append(batch.slice(start, end - start))
            yield pa.Table.from_batches(parts, TRAJECTORY_SCHEMA).combine_chunks()

    def write(self) -> None:
        """Write ``target`` (replaced atomically, zstd, ``ROW_GROUP_SIZE`` rows per row group,
        statistics of ``STATISTICS_COLUMNS``)."""
        with atomic_parquet_writer(self.target, TRAJECTORY_SCHEMA, write_statistics=STATISTICS_COLUMNS) as writer:
            for group in self._sorted_groups():
                writer.write_table(group, row_group_size=ROW_GROUP_SIZE)


def _keyed_rows(reader, run: int) -> Iterator[tuple]:
    """(site, traj_id, step_idx, run, batch, row) per row of one sorted spill, in its order."""
    for b in range(reader.num_record_batches):
        batch = reader.get_batch(b)
        keys = zip(*(batch.column(name).to_pylist() for name, _ in STORAGE_ORDER))
        for row, (site, traj, step) in enumerate(keys):
            yield site, traj, step, run, batch, row


# The largest cap --max-decompressed-mb takes (1 TiB): a step pickle is a few MB at most.
MAX_DECOMPRESSED_MB_LIMIT = 2**20


def _mb_problem(value) -> str | None:
    """Why ``value`` is not a usable decompression cap in MB, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, not {type(value).__name__}"
    if not math.isfinite(value):
        return f"must be a finite number, not {value}"
    if not value > 0:
        return f"must be positive, not {value}"
    if value > MAX_DECOMPRESSED_MB_LIMIT:
        return f"must be at most {MAX_DECOMPRESSED_MB_LIMIT} (1 TiB), not {value:g}"
    return None


def _mb(text: str) -> float:
    """--max-decompressed-mb, range-checked where it is parsed."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    problem = _mb_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


@dataclass
class IngestCommand(Configurable):
    """The flags of ``python -m data.ingest``."""

    ARG_GROUP = "ingest"

    source: str = field(metadata={"choices": tuple(sorted(READERS)), "help": "the inputs' format"})
    input: list[str] = field(metadata={"metavar": "PATH", "help": "files or folders to read"})
    out: str = field(metadata={"help": "run directory to write (a used one: its later outputs are removed)"})
    max_decompressed_mb: float = field(default=DEFAULT_MAX_DECOMPRESSED_MB, metadata={
        "type": _mb, "metavar": "MB",
        "help": "agentlab: reject a step or goal pickle that decompresses to more than this"})


def build_parser():
    ap = make_parser("python -m data.ingest", __doc__)
    IngestCommand.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = IngestCommand.from_args(build_parser().parse_args(argv))
    try:
        stats = ingest(args.source, args.input, args.out, args.max_decompressed_mb)
    except (FileNotFoundError, ValueError, RunDirError) as e:
        return error_exit(e)
    print(stats.summary())
    if (line := stage_loss_line(stats, "records")):
        print(line)
    print(f"wrote {RunDir(args.out).trajectories}")
    if stats.n_out == 0:
        print("error: nothing could be ingested; see rejects.jsonl", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
