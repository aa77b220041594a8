"""Pinned schemas of ``graphs/<site>/nodes.parquet``, ``edges.parquet`` and ``steps.parquet``,
and how stages read a run directory's tables."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from data.rundir import RunDirError, RunDirNotWritable

NODE_SCHEMA = pa.schema([
    pa.field("node_id", pa.string(), nullable=False),
    pa.field("site", pa.string(), nullable=False),
    pa.field("url", pa.string(), nullable=False),           # normalized URL path of the page
    pa.field("kind", pa.string(), nullable=False),          # 'element' | 'virtual'
    pa.field("role", pa.string(), nullable=False),          # accessible role; the op family for virtual nodes
    pa.field("name", pa.string(), nullable=False),          # accessible name; the op for virtual nodes
    pa.field("vtype", pa.string()),                          # viewport | navigation | tabs | user | pointer | keyboard
    pa.field("ancestors", pa.string()),                      # JSON [[role, name], ...], root first
    pa.field("ordinal", pa.int32()),
    pa.field("signature", pa.string()),                      # JSON [[role, name], ...] of direct children
    pa.field("positions", pa.string()),                      # JSON ancestor ordinals, only for repeated widgets
    # 'axtree' | 'html' | 'flat' (inferred) | 'none' (virtual: null)
    pa.field("context", pa.string()),
    pa.field("interactive", pa.bool_(), nullable=False),    # interactive role (else: only ever acted on)
    pa.field("n_obs", pa.int64(), nullable=False),          # observations it appeared in
    pa.field("n_traj", pa.int64(), nullable=False),         # trajectories it appeared in
    pa.field("bids", pa.list_(pa.string()), nullable=False),    # runtime ids it had (a sample, up to 8)
    pa.field("ops", pa.list_(pa.string()), nullable=False),     # ops demonstrated on it
    pa.field("values", pa.list_(pa.string()), nullable=False),  # values typed / selected / pressed into it
    pa.field("n_demos", pa.int64(), nullable=False),        # demonstrated actions on it
])

EDGE_SCHEMA = pa.schema([
    pa.field("src", pa.string(), nullable=False),
    pa.field("dst", pa.string(), nullable=False),
    pa.field("type", pa.string(), nullable=False),          # 'containment' (child -> ancestor) | 'interaction'
    pa.field("depth_gap", pa.int32()),                       # AXTree depth difference (containment)
    pa.field("op", pa.string()),                             # op of a_t (interaction)
    pa.field("count", pa.int64(), nullable=False),          # observations (containment) / transitions (interaction)
    pa.field("trajectories", pa.list_(pa.string()), nullable=False),
])


def pinned_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Rows as a table of a pinned schema (a wrong type fails here; a missing column is null,
    keys outside the schema are ignored), equal to ``pa.Table.from_pylist(rows, schema=schema)``.

    Built by Arrow's JSON reader from one JSON line per row: converting Python lists
    (``from_pylist``, ``pa.array``) makes pyarrow import pandas, ~0.35 s of CPU in every process
    that writes a graph, which is a tenth of a whole paper-scale build."""
    if not rows:
        return schema.empty_table()
    data = "\n".join(map(_json_line, rows)).encode("utf-8")
    table = pa_json.read_json(io.BytesIO(data),
                              read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
                              parse_options=pa_json.ParseOptions(explicit_schema=schema))
    return table.select(schema.names).cast(schema).combine_chunks()


_json_line = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode

# Where each demonstrated step landed in the graph (one row per mapped step).
STEP_SCHEMA = pa.schema([
    pa.field("traj_id", pa.string(), nullable=False),
    pa.field("step_idx", pa.int32(), nullable=False),
    pa.field("site", pa.string(), nullable=False),
    pa.field("node_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),          # 'element' | 'virtual'
    pa.field("op", pa.string(), nullable=False),
    pa.field("page", pa.string(), nullable=False),          # content page of the observation
])


@contextlib.contextmanager
def reading(path: str | Path, producer: str):
    """Turn a table that cannot be read (not Parquet, truncated, corrupt pages, a missing
    column) into one ``RunDirError`` line naming the file and the command that rewrites it,
    which every stage CLI prints with exit code 2, instead of a traceback."""
    try:
        yield
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RunDirError(f"cannot read {path}: {first} (rewrite it with `{producer}`)") from None


def require_columns(path: str | Path, columns, producer: str) -> list[str]:
    """The column names of a Parquet file, after checking that it opens and has ``columns``."""
    with reading(path, producer):
        names = pq.read_schema(path).names
    missing = [c for c in columns if c not in names]
    if missing:
        raise RunDirError(f"cannot read {path}: no column {', '.join(missing)} (rewrite it with `{producer}`)")
    return names


def check_outputs(run, files: tuple[str, ...] = (), dirs: tuple[str, ...] = ()) -> None:
    """Before the work: each output file (relative to the run directory) can be replaced and each
    output folder is a folder that accepts a new file (``RunDirNotWritable`` otherwise; the run
    directory itself and the stage's declared outputs are probed by ``RunDir.check_inputs``)."""
    for rel in files:
        if (run.root / rel).is_dir():
            raise RunDirNotWritable(f"cannot write to {run.root / rel}: it is a directory")
    for rel in dirs:
        path = run.root / rel
        if path.exists() and not path.is_dir():
            raise RunDirNotWritable(f"cannot write to {path}: it is not a directory")
    run.check_writable(*[rel for rel in dirs if (run.root / rel).is_dir()])
