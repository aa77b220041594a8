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
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cli.config import Configurable, make_parser
from cli.errors import error_exit
from data.loss import stage_loss_line
from data.readers.agentlab import read_agentlab
from data.readers.canonical import read_canonical
from data.readers.safe_pickle import DEFAULT_MAX_DECOMPRESSED_MB
from data.readers.webprm import read_webprm
from data.rundir import Reject, RunDir, RunDirError, StageStats, atomic_write_parquet
from data.schema import ROW_GROUP_SIZE, StepRecord, check_record, for_storage, steps_to_table

READERS = {"agentlab": read_agentlab, "webprm": read_webprm, "canonical": read_canonical}
STAGE = "ingest"


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
    records: list[StepRecord] = []
    rejects: list[Reject] = []
    seen: set[tuple[str, int]] = set()
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
            records.append(item)
    stats.n_out = len(records)
    trajs = {r.traj_id for r in records}
    table = for_storage(steps_to_table(records))
    # The new trajectories make every later output stale: remove them before they are replaced.
    cleared = run.clear_downstream()
    if cleared and not quiet:
        print(f"re-ingesting over a used run directory: removed {', '.join(cleared)} "
              f"(rerun the later stages; the LLM cache still serves their requests)", file=sys.stderr)
    stats.extra = {"source": source, "inputs": [str(p) for p in paths], "trajectories": len(trajs),
                   "successful_trajectories": len({r.traj_id for r in records if r.success}),
                   "sites": sorted({r.site for r in records}),
                   **({"max_decompressed_mb": max_decompressed_mb} if source == "agentlab" else {}),
                   **({"cleared": cleared} if cleared else {})}
    atomic_write_parquet(run.trajectories, table, ROW_GROUP_SIZE)
    run.write_stage(stats, rejects)
    return stats


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
