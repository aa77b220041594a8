"""A run directory as mining leaves it, written from hand-made rows: the replay and benchmark tests'
episodes (canonical trajectory rows) and their sampled pairs (candidate rows)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_mined_run(root: Path, rows: list[dict], cands: list[dict]) -> None:
    """Ingest ``rows`` into ``root`` and write ``cands`` as its ``candidates.parquet``, with the
    ``proposals.mine`` stage recorded (so later stages take it as their input)."""
    from data.ingest import ingest
    from data.rundir import RunDir, StageStats
    from data.schema import CANDIDATE_SCHEMA, STORAGE_ORDER, TRAJECTORY_SCHEMA

    src = root.parent / f"{root.name}_src.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=TRAJECTORY_SCHEMA).sort_by(STORAGE_ORDER), src)
    ingest("canonical", [src], root, quiet=True)
    run = RunDir(root)
    run.check_inputs("proposals.mine", run.trajectories)
    pq.write_table(pa.Table.from_pylist(cands, schema=CANDIDATE_SCHEMA), root / "candidates.parquet")
    run.write_stage(StageStats("proposals.mine", n_in=len(cands), n_out=len(cands)), [])
