"""No silent zeros (``data.loss``): a stage whose output is empty or under half its input prints one
line breaking the loss down by reason; ``data.ingest`` and ``graph.build`` do, on real inputs."""

from __future__ import annotations

import pyarrow.parquet as pq

from data.loss import loss_line
from scripted_teacher import BUNDLED


def test_no_line_while_most_records_come_through():
    assert loss_line("s", 10, 5, {"x": 5}) is None and loss_line("s", 10, 10, {}) is None


def test_the_loss_by_reason_most_first_with_the_rest_unexplained():
    line = loss_line("graph.build", 10, 1, {"b": 2, "a": 6, "zero": 0}, "steps", why={"a": "why a"})
    assert line == "graph.build: 1 of 10 steps kept; lost 9: 6 a (why a), 2 b, 1 without a recorded reason"


def test_an_empty_input_and_another_kind_of_output():
    assert loss_line("proposals.mine", 0, 0, {}, "steps", "candidates") == \
        "proposals.mine: 0 candidates: its input holds no steps"
    assert loss_line("proposals.mine", 7, 0, {"virtual_positive": 7}, "steps", "candidates") == \
        "proposals.mine: 0 candidates from 7 steps; lost 7: 7 virtual_positive"


def _sample(tmp_path, **columns):
    """The bundled sample with some columns replaced (a function of the row index)."""
    table = pq.read_table(BUNDLED)
    for name, value in columns.items():
        values = [value(i, v) for i, v in enumerate(table.column(name).to_pylist())]
        table = table.set_column(table.schema.get_field_index(name), table.schema.field(name), [values])
    path = tmp_path / "sample.parquet"
    pq.write_table(table, path)
    return path, table.num_rows


def test_ingest_says_why_most_records_were_rejected(tmp_path, capsys):
    from data.ingest import main

    path, n = _sample(tmp_path, intent=lambda i, v: v if i % 4 == 0 else " ")      # 3 of 4 without a goal
    assert main(["--source", "canonical", "--input", str(path), "--out", str(tmp_path / "run")]) == 0
    kept = (n + 3) // 4
    assert f"ingest: {kept} of {n} records kept; lost {n - kept}: {n - kept} missing_goal" in capsys.readouterr().out


def test_graph_build_says_why_no_step_was_mapped(tmp_path, capsys):
    from data.ingest import ingest
    from graph.build import main

    path, n = _sample(tmp_path, success=lambda i, v: False)
    ingest("canonical", [path], tmp_path / "run")
    assert main(["--run", str(tmp_path / "run"), "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert f"graph.build: 0 of {n} steps kept; lost {n}: {n} unsuccessful_trajectory (graphs learn from " \
           "successful trajectories; --include-failed keeps them)" in out
