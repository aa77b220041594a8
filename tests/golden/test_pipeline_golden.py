"""Golden files: the pipeline's outputs on the bundled sample stay what they were.

The bundled AgentLab sample is ingested, its graphs built and its candidates mined (seed 42, 12
pairs sampled, fill values from a scripted server); a scripted teacher verifies the sample (one pair
always disagreed with, one never answered with a tag); the preferences are audited and exported
(TRL, WebPRMBench) and a scripted judge is evaluated on the WebPRMBench export. Pinned in
``tests/golden/pipeline/``: the mined candidates and the miner's stage record, the audit JSON of
the candidates and of the preferences, the export rows, and ``prm.evaluate``'s result, table and
per-pair records. Durations, digests of Parquet bytes (they carry pyarrow's version), the run
folder and the servers' ports are normalised (``golden_files.stable``).

The same run counts ``graph.axtree.parse_axtree``'s calls from graph.build to the exports and the
pair viewer's listing: at most one per observation (issue 42).

Regenerate after an intended change: ``make golden`` (``SURFPRM_UPDATE_GOLDEN=1 pytest
tests/golden``), then review ``git diff tests/golden``."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from golden_files import check, stable
from scripted_teacher import BUNDLED, ScriptedTeacher, llm_config, start

SAMPLE = 12
SEED = 42


def _judge_answer(payload: dict) -> dict:
    """A deterministic judge: prefers the response whose action sorts first, answers without a tag
    when the two actions have the same length (a share of the pairs is unparsed)."""
    from judgment.parse import parse_prompt

    parts = parse_prompt(payload["messages"])
    r1, r2 = parts.response_1, parts.response_2
    text = ("Both look plausible." if len(r1) == len(r2)
            else f"<think>Compared.</think>\n<Answer>Response {1 if r1 < r2 else 2}</Answer>")
    return {"id": "golden", "object": "chat.completion", "created": 0, "model": payload.get("model", "golden"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    from data.ingest import ingest
    from llm.serve import serve_in_thread
    from prm.evaluate import main as evaluate_main

    run = tmp_path_factory.mktemp("golden_run")
    ingest("canonical", [BUNDLED], run)
    with counting_parses() as parses:
        _through_export(run)
    (run / "parses.json").write_text(json.dumps(parses))

    judge = serve_in_thread(_judge_answer, "scripted-judge")
    try:
        assert evaluate_main(["--bench", str(run / "export" / "webprmbench.parquet"), "--out",
                              str(run / "eval" / "result.json"), "--base-url", judge.base_url, "--model",
                              "scripted-judge", "--cache-dir", str(run / ".llm"), "--max-retries", "0",
                              "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--name", "scripted"]) == 0
    finally:
        judge.shutdown()
    return run


def _through_export(run: Path) -> None:
    """graph.build, mining, the teacher, the preferences' audit, the exports and the viewer's listing."""
    from dataset.export import main as export_main
    from dataset.viewer.source import PairSource
    from graph.build import build_graphs
    from llm import LLMConfig
    from llm.serve import fixed_answer, serve_in_thread
    from proposals.audit import write_audit
    from proposals.mine import MineConfig, mine
    from teacher.verify import VerifyConfig, verify

    build_graphs(run, workers=1)
    fill = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "scripted-fill")
    try:
        mine(run, MineConfig(sample_size=SAMPLE, seed=SEED),
             LLMConfig(base_url=fill.base_url, model="scripted-fill", cache_dir=str(run / ".llm")),
             workers=1, show_progress=False)
    finally:
        fill.shutdown()

    sampled = sorted((r for r in pq.read_table(run / "candidates.parquet").to_pylist() if r["sampled"]),
                     key=lambda r: r["pair_id"])
    teacher = ScriptedTeacher(sampled)
    teacher.script = {sampled[0]["pair_id"]: ["disagree"] * 3, sampled[1]["pair_id"]: ["unparsed", "agree"]}
    server = start(teacher)
    try:
        verify(run, VerifyConfig(k=3, axtree_chars=800), llm_config(server, run / ".llm"), progress=False)
    finally:
        server.shutdown()
    write_audit(run, "preferences")

    assert export_main(["--run", str(run), "--format", "trl", "--format", "webprmbench", "--split", "all",
                       "--no-card"]) == 0

    assert PairSource.open(run=run).pairs


@contextlib.contextmanager
def counting_parses():
    """Every binding of ``graph.axtree.parse_axtree`` counts its calls (a dict: ``calls``)."""
    import dataset.viewer.source  # noqa: F401  (the modules that parse, imported so that their bindings count)
    import graph.axtree
    import graph.resolve  # noqa: F401
    import proposals.audit  # noqa: F401

    real, got = graph.axtree.parse_axtree, {"calls": 0}

    def counting(*args, **kwargs):
        got["calls"] += 1
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        for module in list(sys.modules.values()):
            if getattr(module, "parse_axtree", None) is real:
                mp.setattr(module, "parse_axtree", counting)
        yield got


def _rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _mine_record(run: Path) -> dict:
    return json.loads((run / "stats.json").read_text())["proposals.mine"]


# golden file -> how it is read from the run folder
OUTPUTS = {
    "pipeline/candidates.json": lambda run: sorted(_rows(run / "candidates.parquet"), key=lambda r: r["pair_id"]),
    "pipeline/mine_stats.json": _mine_record,
    "pipeline/audit_candidates.json": lambda run: json.loads((run / "audit" / "candidates.json").read_text()),
    "pipeline/audit_preferences.json": lambda run: json.loads((run / "audit" / "preferences.json").read_text()),
    "pipeline/export_trl_train.json": lambda run: _rows(run / "export" / "trl" / "train.parquet"),
    "pipeline/export_trl_test.json": lambda run: _rows(run / "export" / "trl" / "test.parquet"),
    "pipeline/export_webprmbench.json": lambda run: _rows(run / "export" / "webprmbench.parquet"),
    "pipeline/evaluate.json": lambda run: json.loads((run / "eval" / "result.json").read_text()),
    "pipeline/evaluate.md": lambda run: (run / "eval" / "result.md").read_text(),
    "pipeline/evaluate_pairs.json": lambda run: [json.loads(line) for line in
                                                 (run / "eval" / "result.pairs.jsonl").read_text().splitlines()],
}


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_pipeline_output_matches_its_golden_file(pipeline, name):
    check(name, stable(OUTPUTS[name](pipeline), {str(pipeline): "RUN"}))


def test_golden_run_is_a_real_sample(pipeline):
    """What makes the golden files worth pinning: every rule fired, the sample was verified with a
    discard, and the judge's result has both right and wrong verdicts."""
    record = _mine_record(pipeline)
    assert all(r["out"] > 0 for r in record["rules"].values())
    assert sum(r["sampled"] for r in _rows(pipeline / "candidates.parquet")) == SAMPLE
    kept = len(_rows(pipeline / "preferences.parquet"))
    assert 0 < kept < SAMPLE
    result = json.loads((pipeline / "eval" / "result.json").read_text())
    assert 0 < result["macro"]["pairwise"] < 1 and result["overall"]["pairs"] == len(
        _rows(pipeline / "export" / "webprmbench.parquet"))
    # the golden candidates are the file's rows as they are (nothing in them is normalised away)
    rows = OUTPUTS["pipeline/candidates.json"](pipeline)
    assert stable(rows, {str(pipeline): "RUN"}) == rows


def test_the_run_parses_each_observation_once(pipeline):
    """Issue 42: from graph.build to the exports and the viewer, each observation's AXTree text is
    parsed at most once (231 parses of the 84 observations before graph.parsed)."""
    observations = pq.read_metadata(pipeline / "trajectories.parquet").num_rows
    assert 0 < json.loads((pipeline / "parses.json").read_text())["calls"] <= observations
