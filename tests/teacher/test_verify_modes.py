"""Verdict modes of teacher.verify: a local teacher scores by default ('auto'), every verdict
records the mode that produced it, kept pairs hold the bare answer tag (label-only gold)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from scripted_teacher import make_run
from tiny_lm import save_tiny_lm
from data.judgment import answer_text, parse_verdict
from teacher.schema import PREFERENCE_SCHEMA, VERDICT
from teacher.verify import VerifyConfig, verify


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("modes")
    pairs = make_run(root)
    texts = [t for p in pairs for t in (p["action_pos"], p["action_neg"])] + [
        "<Answer>Response 1</Answer> <Answer>Response 2</Answer> think Criteria Analysis"]
    model = save_tiny_lm(texts, tmp_path_factory.mktemp("tiny") / "tiny-lm")
    return root, pairs, model


def _copy(src, dst):
    dst.mkdir()
    for name in ("trajectories.parquet", "candidates.parquet", "stats.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_schema_records_the_mode():
    assert VERDICT.field("mode").type == "string" and not VERDICT.field("mode").nullable


def test_local_teacher_scores(tiny_run, tmp_path):
    from llm import LLMConfig
    from llm.local import load_local_model
    from llm.scoring import score_answers
    from data.judgment import JudgmentFormat
    from data.pairs import load_pairs
    from data.rundir import RunDir

    src, pairs, model = tiny_run
    run = _copy(src, tmp_path / "run")
    stats = verify(run, VerifyConfig(k=3, verdict_mode="score"), LLMConfig(model=model, cache_dir=str(tmp_path / "c")),
                   progress=False)
    assert stats.extra["config"]["verdict_mode"] == "score"
    assert stats.extra["verdict_modes"] == {"score": len(pairs)} and stats.extra["pending"] == 0
    kept = pq.read_table(run / "preferences.parquet").to_pylist()
    disc = pq.read_table(run / "discarded.parquet").to_pylist()
    assert pq.read_schema(run / "preferences.parquet").equals(PREFERENCE_SCHEMA)
    assert len(kept) + len(disc) == len(pairs) == stats.n_in
    lm = load_local_model(model)
    expected = {p.row["pair_id"]: score_answers(lm.model, lm.tokenizer, p.messages).verdict
                for p in load_pairs(RunDir(run), 0, JudgmentFormat())}
    for row in kept + disc:
        assert row["attempts"] == 1 and len(row["verdicts"]) == 1          # deterministic: one attempt
        v = row["verdicts"][0]
        assert v["mode"] == "score" and v["verdict"] == expected[row["pair_id"]]
        assert v["outcome"] == ("agree" if v["verdict"] == row["label"] else "disagree")
    for row in kept:
        assert row["judgment"] == answer_text(row["label"]) and parse_verdict(row["judgment"]) == row["label"]
        assert row["messages"][-1] == {"role": "assistant", "content": row["judgment"]}
    assert all(r["reason"] == "all_attempts_disagree" for r in disc)


def test_generate_mode_is_recorded(tiny_run, tmp_path):
    from llm import LLMConfig

    src, pairs, model = tiny_run
    run = _copy(src, tmp_path / "run")
    stats = verify(run, VerifyConfig(k=1, max_tokens=3, verdict_mode="generate"),
                   LLMConfig(model=model, cache_dir=str(tmp_path / "c")), progress=False)
    assert stats.extra["config"]["verdict_mode"] == "generate"
    rows = pq.read_table(run / "preferences.parquet").to_pylist() + pq.read_table(run / "discarded.parquet").to_pylist()
    assert len(rows) == len(pairs) and all(v["mode"] == "generate" for r in rows for v in r["verdicts"])


def test_mode_resolution():
    assert VerifyConfig().mode_for(True) == "score-both" and VerifyConfig().mode_for(False) == "generate"
    assert VerifyConfig(verdict_mode="generate").mode_for(True) == "generate"
    with pytest.raises(ValueError, match="local teacher"):
        VerifyConfig(verdict_mode="score").mode_for(False)
    with pytest.raises(ValueError):
        VerifyConfig(verdict_mode="vote").mode_for(True)


def test_local_teacher_scores_both_orders_by_default(tiny_run, tmp_path):
    from llm import LLMConfig

    src, pairs, model = tiny_run
    run = _copy(src, tmp_path / "run")
    stats = verify(run, VerifyConfig(), LLMConfig(model=model, cache_dir=str(tmp_path / "c")), progress=False)
    assert stats.extra["config"]["verdict_mode"] == "score-both"
    assert stats.extra["verdict_modes"] == {"score-both": len(pairs)}
    kept = pq.read_table(run / "preferences.parquet").to_pylist()
    assert all(r["verdicts"][0]["mode"] == "score-both" and r["judgment"] == answer_text(r["label"]) for r in kept)
