"""A local teacher's scoring verdicts are cached like generated answers: a rerun of
``teacher.verify`` runs no forward pass, ``stats.json`` counts the answers the cache served, and
the outputs are the same bytes."""

from __future__ import annotations

import json

import pytest

from scripted_teacher import make_run
from teacher.verify import VerifyConfig, verify
from tiny_lm import save_tiny_lm


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache_run")
    pairs = make_run(root, n_pairs=4)
    texts = [t for p in pairs for t in (p["action_pos"], p["action_neg"])] + [
        "<Answer>Response 1</Answer> <Answer>Response 2</Answer>"]
    return root, pairs, save_tiny_lm(texts, tmp_path_factory.mktemp("tiny") / "tiny-lm")


def _forward_counter(model_dir):
    """A list that grows by one per forward pass of the (process-wide) local model."""
    from llm.local import load_local_model

    calls = []
    handle = load_local_model(model_dir).model.register_forward_hook(lambda *a: calls.append(1))
    return calls, handle


@pytest.mark.parametrize("mode", ["score-both", "score"])
def test_rerun_runs_no_forward_pass(tiny_run, tmp_path, mode):
    from llm import LLMConfig

    root, pairs, model = tiny_run
    llm = LLMConfig(model=model, cache_dir=str(tmp_path / "cache"))
    calls, handle = _forward_counter(model)
    try:
        first = verify(root, VerifyConfig(verdict_mode=mode), llm, progress=False)
        n_first = len(calls)
        outputs = {n: (root / n).read_bytes() for n in ("preferences.parquet", "discarded.parquet")}
        second = verify(root, VerifyConfig(verdict_mode=mode), llm, progress=False)
    finally:
        handle.remove()
    per_verdict = 2 if mode == "score-both" else 1          # one forward pass per order (tails ride the cache)
    assert n_first >= per_verdict * len(pairs)
    assert len(calls) == n_first, "the rerun ran the model"
    assert first.extra["llm"]["calls"] == len(pairs) and first.extra["llm"]["cached"] == 0
    assert second.extra["llm"]["calls"] == second.extra["llm"]["cached"] == len(pairs)
    assert second.extra["llm"]["prompt_tokens"] == first.extra["llm"]["prompt_tokens"] > 0
    assert {n: (root / n).read_bytes() for n in outputs} == outputs
    assert json.loads((root / "stats.json").read_text())["teacher.verify"]["llm"]["cached"] == len(pairs)


def test_modes_and_models_do_not_share_entries(tiny_run, tmp_path):
    """The key holds the mode: a 'score' verdict is never served for 'score-both'. --no-cache
    neither reads nor writes."""
    from llm import LLMConfig

    root, pairs, model = tiny_run
    cache = tmp_path / "cache"
    verify(root, VerifyConfig(verdict_mode="score"), LLMConfig(model=model, cache_dir=str(cache)), progress=False)
    both = verify(root, VerifyConfig(verdict_mode="score-both"), LLMConfig(model=model, cache_dir=str(cache)),
                  progress=False)
    assert both.extra["llm"]["cached"] == 0 and len(list(cache.rglob("*.json"))) == 2 * len(pairs)
    calls, handle = _forward_counter(model)
    try:
        none = verify(root, VerifyConfig(verdict_mode="score"),
                      LLMConfig(model=model, cache_dir=str(tmp_path / "other"), no_cache=True), progress=False)
    finally:
        handle.remove()
    assert none.extra["llm"]["cached"] == 0 and len(calls) >= len(pairs) and not (tmp_path / "other").exists()
