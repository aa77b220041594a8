"""The evaluate-prm flow is prm.evaluate: the same options (``EvaluateOptions``), so a local
judge's --judge-mode, --device and --dtype reach it, a local judge in generate mode gets the
1,024-token default as in the CLI, and the flow writes the CLI's result."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.state import State
from dataset.export import MESSAGE
from judgment.format import render_pair

STATE = State(intent="Buy the cheapest blue mug", url="http://shop.test/mugs",
              axtree="[1] RootWebArea 'Shop'\n\t[12] link 'Blue mug $4'\n\t[40] link 'Red mug $9'")


@pytest.fixture
def bench_and_folder(tmp_path):
    from tiny_lm import save_tiny_lm

    msgs, _ = render_pair(STATE, "click('12')", "click('40')")
    schema = pa.schema([("state_idx", pa.int32()), ("pair_idx", pa.int32()), ("expected", pa.int8()),
                        ("prompt", pa.list_(MESSAGE)), ("source_name", pa.string())])
    pq.write_table(pa.Table.from_pylist([{"state_idx": 0, "pair_idx": 0, "expected": 1, "prompt": msgs,
                                          "source_name": "shopping"}], schema=schema), tmp_path / "bench.parquet")
    folder = save_tiny_lm([m["content"] for m in msgs] + ["<Answer>Response 1</Answer>"], tmp_path / "judge")
    return tmp_path / "bench.parquet", folder


@pytest.mark.slow      # a Prefect API (prefect_harness)
def test_evaluate_flow_takes_prm_evaluates_options(prefect_harness, bench_and_folder, tmp_path):
    from flows.prm import main as flow_main
    from prm.evaluate import main as cli_main

    bench, folder = bench_and_folder
    common = ["--model", folder, "--bench", str(bench), "--cache-dir", str(tmp_path / "cache"), "--no-cache"]
    scoring = ["--judge-mode", "score-both", "--device", "cpu", "--dtype", "bfloat16", "--both-orders"]
    assert cli_main([*common, *scoring, "--out", str(tmp_path / "cli.json")]) == 0
    assert flow_main(["evaluate", *common, *scoring, "--out", str(tmp_path / "flow.json")]) == 0
    cli, flow = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("cli", "flow"))
    assert flow["protocol"]["judge_mode"] == "score-both" and flow["protocol"]["dtype"] == "bfloat16"
    assert {k: v for k, v in flow.items() if k != "seconds"} == {k: v for k, v in cli.items() if k != "seconds"}
    assert (tmp_path / "flow.pairs.jsonl").read_bytes() == (tmp_path / "cli.pairs.jsonl").read_bytes()

    # generate mode, no --max-tokens: a full judgment's 1,024 tokens, for a local judge too
    assert flow_main(["evaluate", *common, "--limit-states", "1", "--out", str(tmp_path / "gen.json")]) == 0
    assert json.loads((tmp_path / "gen.json").read_text())["protocol"]["max_tokens"] == 1024
    assert flow_main(["evaluate", *common, "--max-tokens", "3", "--out", str(tmp_path / "gen3.json")]) == 0
    assert json.loads((tmp_path / "gen3.json").read_text())["protocol"]["max_tokens"] == 3
