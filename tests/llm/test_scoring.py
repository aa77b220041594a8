"""Verdicts by scoring (``llm.scoring``) on a tiny random model: the two answer tags' likelihoods
match a plain full-sequence computation, the verdict always parses, and ``LocalJudge``'s modes."""

from __future__ import annotations

import pytest

from tiny_lm import tiny_lm
from data.judgment import ANSWER_TAG, parse_verdict

TEXTS = ["which response is better click scroll fill the page",
         "<Answer>Response 1</Answer> <Answer>Response 2</Answer> Response 1 Response 2",
         "system user assistant think Criteria Analysis because"]
MSGS = [{"role": "system", "content": "which response is better"},
        {"role": "user", "content": "Response 1 click the page Response 2 scroll the page"}]


@pytest.fixture(scope="module")
def lm():
    return tiny_lm(TEXTS, seed=3)


def _full_logprob(model, tok, prefix: str, tag: str) -> float:
    """log p(tag | prefix) by one plain forward pass over prefix + tag."""
    import torch

    ids = tok(prefix + tag, add_special_tokens=False)["input_ids"]
    n_shared = len(tok(prefix + "<Answer>Response", add_special_tokens=False)["input_ids"])
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    return sum(float(logp[i - 1, ids[i]]) for i in range(n_shared, len(ids)))


@pytest.mark.parametrize("rationale", ["", "think the page because click"])
def test_scores_match_a_full_forward_pass(lm, rationale):
    from llm.scoring import prompt_text, score_answers

    model, tok = lm
    s = score_answers(model, tok, MSGS, rationale)
    prefix = prompt_text(tok, MSGS, rationale)
    assert s.logprob_1 == pytest.approx(_full_logprob(model, tok, prefix, ANSWER_TAG.format(1)), abs=1e-4)
    assert s.logprob_2 == pytest.approx(_full_logprob(model, tok, prefix, ANSWER_TAG.format(2)), abs=1e-4)
    assert s.verdict == (1 if s.logprob_1 >= s.logprob_2 else 2)
    assert parse_verdict(s.text) == s.verdict and s.margin == s.logprob_1 - s.logprob_2
    assert s.prompt_tokens > 0


def test_verdict_follows_the_likelier_tag():
    from llm.scoring import TagScore

    assert TagScore(-1.0, -2.0).verdict == 1 and TagScore(-3.0, -2.0).verdict == 2
    assert TagScore(-1.0, -1.0).tie and TagScore(-1.0, -1.0).verdict == 1


def test_a_tokenizer_that_cannot_tell_the_tags_apart_is_refused():
    from llm.scoring import score_answers

    model, tok = tiny_lm(["which response is better"])      # '1' and '2' are both <unk>
    with pytest.raises(ValueError, match="tell the two answer tags apart"):
        score_answers(model, tok, MSGS)


def test_rationale_is_cut_before_the_answer():
    from llm.scoring import rationale_of

    assert rationale_of("<think>a</think> <Answer>Response 2</Answer>") == "<think>a</think> "
    assert rationale_of("no tag") == "no tag"


def test_local_judge_modes(lm):
    from prm.judge import LocalJudge

    model, tok = lm
    prompts = [MSGS, [MSGS[0], {"role": "user", "content": "Response 1 fill Response 2 click"}]]
    gen = LocalJudge(model, tok, max_tokens=3).judge_prompts(prompts)
    assert all(j.mode == "generate" and j.margin is None for j in gen)
    scored = LocalJudge(model, tok, mode="score").judge_prompts(prompts)
    assert all(j.mode == "score" and j.verdict in (1, 2) and parse_verdict(j.text) == j.verdict for j in scored)
    assert all(j.outcome == "verdict" and not j.truncated for j in scored)
    rat = LocalJudge(model, tok, max_tokens=4, mode="rationale").judge_prompts(prompts)
    assert all(j.mode == "rationale" and parse_verdict(j.text) == j.verdict for j in rat)
    with pytest.raises(ValueError):
        LocalJudge(model, tok, mode="vote")


BLOCKS = [{"role": "system", "content": "which response is better"},
          {"role": "user", "content": "[The Begin of Response 1]\nclick the page\n[The End of Response 1]\n"
                                      "[The Begin of Response 2]\nscroll\n[The End of Response 2]"}]


def test_both_orders_cancel_a_position_pull(lm):
    from data.judgment import swap_responses
    from llm.scoring import score_answers, score_both_orders
    from prm.judge import LocalJudge

    model, tok = lm
    both = score_both_orders(model, tok, BLOCKS)
    assert both.margin == pytest.approx(score_answers(model, tok, BLOCKS).margin
                                        - score_answers(model, tok, swap_responses(BLOCKS)).margin)
    flipped = score_both_orders(model, tok, swap_responses(BLOCKS))
    assert flipped.margin == pytest.approx(-both.margin)          # the same response wins either way
    assert {both.verdict, flipped.verdict} == {1, 2} and parse_verdict(both.text) == both.verdict
    j = LocalJudge(model, tok, mode="score-both").judge_prompts([BLOCKS])[0]
    assert (j.mode, j.verdict) == ("score-both", both.verdict)
    with pytest.raises(ValueError, match="no \\[The Begin"):
        score_both_orders(model, tok, MSGS)


def test_cached_scores_round_trip_and_bad_entries_are_misses(lm):
    from llm.scoring import (BothOrdersScore, TagScore, score, score_from_dict, score_to_dict)

    model, tok = lm
    both = score(model, tok, BLOCKS, "score-both")
    assert isinstance(both, BothOrdersScore) and score_from_dict(score_to_dict(both), "score-both") == both
    one = score(model, tok, BLOCKS, "score")
    assert score_from_dict(score_to_dict(one), "score") == one
    assert score_from_dict(score_to_dict(one), "score-both") is None      # another mode's entry
    assert score_from_dict(score_to_dict(both), "score") is None
    good = score_to_dict(TagScore(-1.5, -0.25, 7))
    for bad in ({**good, "object": "chat.completion"}, {"object": "surfprm.score"}, None, [],
                {**good, "given": {**good["given"], "logprob_1": 0.5}},            # a log-probability > 0
                {**good, "given": {**good["given"], "logprob_2": float("nan")}},
                {**good, "given": {**good["given"], "prompt_tokens": -1}},
                {**good, "given": {**good["given"], "prompt_tokens": True}}):
        assert score_from_dict(bad, "score") is None
    with pytest.raises(ValueError, match="mode"):
        score(model, tok, BLOCKS, "vote")


def test_cached_score_keys_on_model_prompt_and_mode(lm, tmp_path):
    from llm.cache import ResponseCache
    from llm.scoring import cached_score
    from tiny_lm import save_tiny_lm

    model_dir = save_tiny_lm(TEXTS, tmp_path / "tiny", seed=3)
    cache = ResponseCache(tmp_path / "cache")
    s, hit = cached_score(model_dir, BLOCKS, "score-both", cache)
    assert not hit and cached_score(model_dir, BLOCKS, "score-both", cache) == (s, True)
    other = [BLOCKS[0], {**BLOCKS[1], "content": BLOCKS[1]["content"] + " now"}]
    assert cached_score(model_dir, other, "score-both", cache)[1] is False       # another prompt
    assert cached_score(model_dir, BLOCKS, "score", cache)[1] is False             # another mode
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 3
