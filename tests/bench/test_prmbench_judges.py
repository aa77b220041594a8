"""bench/prmbench.py's scripted judges and its per-task sample of states for the embedded judge, on
a hand-made benchmark of two tasks (no model, no browser)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from bench.prmbench import main, stratified_subset
from data.state import State
from dataset.export import MESSAGE
from judgment.format import render_pair

STATE = State(intent="Open the tab", axtree="[1] RootWebArea 'Tabs'\n\t[12] tab 'One'\n\t[40] tab 'Two'",
              url="file:///click-tab.html")


def _bench(path, states: dict[str, int]) -> None:
    """4 rows per state, a+ first in the rows of even pair_idx; ``states``: task -> states."""
    schema = pa.schema([("state_idx", pa.int32()), ("pair_idx", pa.int32()), ("expected", pa.int8()),
                        ("prompt", pa.list_(MESSAGE)), ("source_name", pa.string())])
    rows, idx = [], 0
    for task, n in states.items():
        for _ in range(n):
            for pair in range(4):
                pos_first = pair % 2 == 0
                a1, a2 = ("click('12')", "click('40')") if pos_first else ("click('40')", "click('12')")
                rows.append({"state_idx": idx, "pair_idx": pair, "expected": 1 if pos_first else 2,
                             "prompt": render_pair(STATE, a1, a2)[0], "source_name": f"miniwob/{task}"})
            idx += 1
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def test_per_task_sample_and_the_scripted_judges(tmp_path):
    bench = tmp_path / "bench.parquet"
    _bench(bench, {"click-tab": 5, "login-user": 2})
    sub = pq.read_table(stratified_subset(str(bench), 3, 0, tmp_path / "s.parquet")).to_pylist()
    per_task = {}
    for r in sub:
        per_task.setdefault(r["source_name"], set()).add(r["state_idx"])
    assert {k: len(v) for k, v in per_task.items()} == {"miniwob/click-tab": 3, "miniwob/login-user": 2}
    assert len(sub) == 4 * 5 and all(sum(r["state_idx"] == s for r in sub) == 4 for s in per_task["miniwob/click-tab"])
    draws = {tuple(sorted({r["state_idx"] for r in pq.read_table(
        stratified_subset(str(bench), 3, seed, tmp_path / f"{seed}.parquet")).to_pylist()})) for seed in range(6)}
    assert len(draws) > 1                                       # the sample moves with the seed

    out = tmp_path / "judges"
    assert main(["--bench", str(bench), "--out", str(out), "--no-embedded", "--states-per-task", "3"]) == 0
    first = json.loads((out / "position-1.json").read_text())
    assert first["overall"]["correct"] == 14 and first["overall"]["pairs"] == 28     # a+ first in half the rows
    assert first["overall"]["states_correct"] == 0
    subset = json.loads((out / "position-1-subset.json").read_text())
    assert subset["overall"]["pairs"] == 20 and subset["name"] == "position-1-subset"
    coin = json.loads((out / "random.json").read_text())
    assert 0 < coin["overall"]["correct"] < 28
    assert "position-1-subset" in (out / "compare.md").read_text()
