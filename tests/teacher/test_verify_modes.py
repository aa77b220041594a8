"""Verdict modes of teacher.verify: a local teacher scores by default ('auto'), every verdict
records the mode that produced it, kept pairs hold the bare answer tag (label-only gold)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from judgment.parse import answer_text, parse_verdict
from scripted_teacher import make_run
from teacher.schema import PREFERENCE_SCHEMA
from teacher.verify import VerifyConfig, verify
from tiny_lm import save_tiny_lm


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


def test_each_verdict_is_written_with_the_mode_that_produced_it(tiny_run, tmp_path):
    """A written verdict keeps its own attempt's mode: decisions of two modes go through
    ``write_outputs`` and come back from the Parquet files with those modes, not a default."""
    from data.rundir import RunDir
    from judgment.format import JudgmentFormat
    from judgment.pairs import load_pairs
    from teacher.verify import Attempt, Decision, write_outputs

    src, _, _ = tiny_run
    run = _copy(src, tmp_path / "run")
    pairs = load_pairs(RunDir(run), 0, JudgmentFormat())[:3]
    modes = {pairs[0].row["pair_id"]: ["score-both"], pairs[1].row["pair_id"]: ["score"],
             pairs[2].row["pair_id"]: ["generate", "generate"]}
    decisions = []
    for p in pairs:
        attempts = [Attempt(i + 1, i, p.label if i == 1 else 3 - p.label, "agree" if i == 1 else "disagree", "t", 1, 0,
                            0.0, mode=m) for i, m in enumerate(modes[p.row["pair_id"]])]
        if attempts[-1].outcome == "agree":
            decisions.append(Decision(p, "kept", attempts, judgment=answer_text(p.label)))
        else:
            decisions.append(Decision(p, "discarded", attempts, reason="all_attempts_disagree"))
    write_outputs(RunDir(run), decisions, "m")
    rows = pq.read_table(run / "preferences.parquet").to_pylist() + pq.read_table(run / "discarded.parquet").to_pylist()
    assert {r["pair_id"]: [v["mode"] for v in r["verdicts"]] for r in rows} == modes


def test_score_modes_record_an_effective_k_of_one(tiny_run, tmp_path):
    """K attempts of a deterministic verdict would repeat it: a score mode makes one, records
    ``effective_k`` 1 with its note, and refuses nothing (``--k 5`` and ``make run``'s ``--k 2``)."""
    from llm import LLMConfig

    src, pairs, model = tiny_run
    for k in (5, 2):
        run = _copy(src, tmp_path / f"run{k}")
        stats = verify(run, VerifyConfig(k=k), LLMConfig(model=model, cache_dir=str(tmp_path / "c")), progress=False)
        cfg = stats.extra["config"]
        assert cfg["k"] == k and cfg["effective_k"] == 1 and "deterministic" in cfg["effective_k_note"]
        assert stats.extra["calls_decided"] == stats.n_in == len(pairs)       # one verdict per pair, not k
        rows = [*pq.read_table(run / "preferences.parquet").to_pylist(),
                *pq.read_table(run / "discarded.parquet").to_pylist()]
        assert {r["attempts"] for r in rows} == {1}


def test_local_teacher_scores(tiny_run, tmp_path):
    from data.rundir import RunDir
    from judgment.format import JudgmentFormat
    from judgment.pairs import load_pairs
    from llm import LLMConfig
    from llm.local import load_local_model
    from llm.scoring import score

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
    expected = {p.row["pair_id"]: score(lm.model, lm.tokenizer, p.messages, "score").verdict
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
    assert stats.extra["config"]["effective_k"] == 1 == stats.extra["config"]["k"]
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


def test_outputs_converted_in_batches_write_the_same_bytes(tiny_run, tmp_path, monkeypatch):
    """``write_outputs`` converts the rows to Arrow ``ROW_BATCH`` at a time (a large sample's rows
    at once took twice as long): batches of one row, in any order of the decisions, write the
    bytes of one batch, sorted by pair id."""
    import random

    import teacher.verify as tv
    from data.rundir import RunDir
    from judgment.format import JudgmentFormat
    from judgment.pairs import load_pairs
    from teacher.verify import Attempt, Decision, write_outputs

    src, _, _ = tiny_run
    pairs = load_pairs(RunDir(src), 0, JudgmentFormat())
    assert len(pairs) >= 3
    decisions = [Decision(p, "kept", [Attempt(1, 0, p.label, "agree", "t", 1, 0, 0.0)], judgment=answer_text(p.label))
                 if n % 3 else Decision(p, "discarded", [Attempt(1, 0, 3 - p.label, "disagree", "t", 1, 0, 0.0)],
                                        reason="all_attempts_disagree")
                 for n, p in enumerate(pairs)]
    whole = _copy(src, tmp_path / "whole")
    assert write_outputs(RunDir(whole), decisions, "m") == (len(pairs) - len(pairs[::3]), len(pairs[::3]))
    monkeypatch.setattr(tv, "ROW_BATCH", 1)
    one = _copy(src, tmp_path / "one")
    random.Random(0).shuffle(decisions)
    write_outputs(RunDir(one), decisions, "m")
    for name in ("preferences.parquet", "discarded.parquet"):
        assert (one / name).read_bytes() == (whole / name).read_bytes()
    ids = pq.read_table(whole / "preferences.parquet", columns=["pair_id"]).column("pair_id").to_pylist()
    assert ids == sorted(ids)
