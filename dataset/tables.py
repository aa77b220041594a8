"""How the dataset end reads a run directory: its tables each with the schema its stage pins.

``preferences.parquet`` and ``discarded.parquet`` are read with ``teacher.schema``'s
``PREFERENCE_SCHEMA`` / ``DISCARD_SCHEMA``, ``candidates.parquet`` with ``data.schema``'s
``CANDIDATE_SCHEMA``: a column the reader needs that is missing or has another type than the pin
is one ``RunDirError`` line naming the file, the columns and the command that rewrites it (every
CLI of this package prints it with exit code 2), not a ``KeyError`` or a wrong row further on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data.rundir import RunDirError, stage_command
from data.schema import CANDIDATE_SCHEMA
from graph.schema import reading
from teacher.schema import DISCARD_SCHEMA, PREFERENCE_SCHEMA

# file name -> (its pinned schema, the stage that writes it)
PINNED: dict[str, tuple[pa.Schema, str]] = {
    "candidates.parquet": (CANDIDATE_SCHEMA, "proposals.mine"),
    "preferences.parquet": (PREFERENCE_SCHEMA, "teacher.verify"),
    "discarded.parquet": (DISCARD_SCHEMA, "teacher.verify"),
}


def schema_problems(actual: pa.Schema, pinned: pa.Schema, columns: list[str]) -> list[str]:
    """What keeps ``columns`` of a file with schema ``actual`` from reading as ``pinned`` says."""
    problems = []
    for name in columns:
        want, i = pinned.field(name), actual.get_field_index(name)
        if i < 0:
            problems.append(f"no column {name}")
        elif not actual.field(i).type.equals(want.type):
            problems.append(f"column {name} is {actual.field(i).type}, not {want.type}")
    return problems


def read_pinned(path: str | Path, columns: list[str]) -> list[dict]:
    """``columns`` of one of the ``PINNED`` tables as rows, after checking them against its pin."""
    path = Path(path)
    pinned, stage = PINNED[path.name]
    producer = stage_command(stage)
    with reading(path, producer):
        actual = pq.read_schema(path)
    problems = schema_problems(actual, pinned, columns)
    if problems:
        raise RunDirError(f"cannot read {path}: {'; '.join(problems)}, against the schema {stage} pins "
                          f"(rewrite it with `{producer}`)")
    with reading(path, producer):
        return pq.read_table(path, columns=columns).to_pylist()


def require_run_dir(parser: argparse.ArgumentParser, run: str) -> None:
    """Stop a command of this package (exit 2, after the flags' own checks) when ``--run`` is not
    a directory: they read a run directory, they do not make one where a typo points."""
    if not Path(run).is_dir():
        parser.error(f"--run {run}: no such run directory")
