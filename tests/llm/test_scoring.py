"""Verdicts by scoring (``llm.scoring``) on a tiny random model: the two answer tags' likelihoods
match a plain full-sequence computation, the verdict always parses, and ``LocalJudge``'s modes."""

from __future__ import annotations

import pytest

from judgment.format import ANSWER_TAG
from judgment.parse import parse_verdict
from tiny_lm import tiny_lm

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
    from llm.scoring import prompt_text, score

    model, tok = lm
    s = score(model, tok, MSGS, "score", rationale)
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
    from llm.scoring import score

    model, tok = tiny_lm(["which response is better"])      # '1' and '2' are both <unk>
    with pytest.raises(ValueError, match="tell the two answer tags apart"):
        score(model, tok, MSGS, "score")


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
    from judgment.parse import swap_responses
    from llm.scoring import score
    from prm.judge import LocalJudge

    model, tok = lm
    both = score(model, tok, BLOCKS, "score-both")
    assert both.margin == pytest.approx(score(model, tok, BLOCKS, "score").margin
                                        - score(model, tok, swap_responses(BLOCKS), "score").margin)
    flipped = score(model, tok, swap_responses(BLOCKS), "score-both")
    assert flipped.margin == pytest.approx(-both.margin)          # the same response wins either way
    assert {both.verdict, flipped.verdict} == {1, 2} and parse_verdict(both.text) == both.verdict
    j = LocalJudge(model, tok, mode="score-both").judge_prompts([BLOCKS])[0]
    assert (j.mode, j.verdict) == ("score-both", both.verdict)
    with pytest.raises(ValueError, match="no \\[The Begin"):
        score(model, tok, MSGS, "score-both")


def test_cached_scores_round_trip_and_bad_entries_are_misses(lm):
    from llm.scoring import BothOrdersScore, TagScore, score, score_from_dict, score_to_dict

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


# -- one KV cache for many prompts -----------------------------------------------------------------
def _plain_score(model, tok, messages):
    """Both tags' log-probabilities after ``messages`` by a plain full pass over the prompt and each
    tag (no cache shared), scoring each tag from where the two tagged sequences part."""
    import torch

    from llm.scoring import prompt_text, tag_token_ids

    shared, *tails = tag_token_ids(tok, prompt_text(tok, messages))
    out = []
    for tail in tails:
        # logits only where the tail's tokens are predicted (the pass itself runs every token)
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([shared + tail]), logits_to_keep=len(tail) + 1).logits[0]
        logp = torch.log_softmax(logits.float(), -1)
        out.append(sum(float(logp[i, t]) for i, t in enumerate(tail)))
    return tuple(out)


def _counting(model) -> tuple[list[int], object]:
    """(the input tokens of each forward pass of ``model`` from now on, the hook's handle)."""
    ran = []
    handle = model.register_forward_pre_hook(lambda m, args, kwargs: ran.append(kwargs["input_ids"].shape[-1]),
                                             with_kwargs=True)
    return ran, handle


def _blocks(first: str, second: str, page: str = "the page") -> list[dict]:
    return [BLOCKS[0], {"role": "user", "content": f"click {page} fill\n[The Begin of Response 1]\n{first}\n"
                                                   f"[The End of Response 1]\n[The Begin of Response 2]\n{second}\n"
                                                   "[The End of Response 2]\nwhich response is better"}]


def test_many_prompts_on_one_cache_score_as_separate_full_passes():
    from judgment.parse import swap_responses
    from llm.scoring import prompt_text, score_many, tag_token_ids

    model, tok = tiny_lm(TEXTS, seed=5)
    prompts = [_blocks("click", "scroll"), _blocks("scroll", "fill"), _blocks("click", "scroll", "a page"),
               _blocks("fill the page", "click")]
    ran, hook = _counting(model)
    both = score_many(model, tok, prompts, "score-both")
    hook.remove()
    # plain passes: every order's prompt and both tags in full
    plain = sum(len(t) for p in prompts for m in (p, swap_responses(p))
                for t in tag_token_ids(tok, prompt_text(tok, m)))
    assert len(ran) == 4 * len(prompts) and sum(ran) < 0.75 * plain, "the orders and prompts share no prefix"
    for p, s in zip(prompts, both):
        for tags, order in ((s.given, p), (s.swapped, swap_responses(p))):
            lp_1, lp_2 = _plain_score(model, tok, order)
            assert tags.logprob_1 == pytest.approx(lp_1, abs=1e-4) and tags.logprob_2 == pytest.approx(lp_2, abs=1e-4)
    for b, one in zip(both, score_many(model, tok, prompts, "score")):
        assert (b.given.logprob_1, b.given.logprob_2) == pytest.approx((one.logprob_1, one.logprob_2), abs=1e-4)


def test_local_judge_scores_a_batch_once_and_caches_each_prompt(tmp_path):
    from llm.cache import ResponseCache
    from llm.scoring import _encode, prompt_text, score
    from prm.judge import LocalJudge

    model, tok = tiny_lm(TEXTS, seed=5)
    prompts = [_blocks("click", "scroll"), _blocks("scroll", "fill"), _blocks("fill the page", "click")]
    judge = LocalJudge(model, tok, mode="score-both", cache=ResponseCache(tmp_path), model_id="tiny")
    batched = judge.judge_prompts(prompts)
    assert judge.computed == 3 and judge.cached == 0
    for j, p in zip(batched, prompts):
        alone = score(model, tok, p, "score-both")
        assert j.margin == pytest.approx(alone.margin, abs=1e-4) and j.verdict == alone.verdict
    ran, hook = _counting(model)
    again = judge.judge_prompts(prompts[1:] + [_blocks("click", "fill")])
    hook.remove()
    assert judge.cached == 2 and judge.computed == 4
    assert [j.margin for j in again[:2]] == [j.margin for j in batched[1:]]
    # the new prompt continues from the kept cache of the last call: its first pass is shorter than it
    assert ran[0] < len(_encode(tok, prompt_text(tok, _blocks("click", "fill"))))
    assert again[2].margin == pytest.approx(score(model, tok, _blocks("click", "fill"), "score-both").margin, abs=1e-4)


@pytest.mark.slow
def test_shared_prefix_scores_equal_two_plain_passes_on_the_embedded_model():
    """The real embedded model, the real comparative-judgment prompt: score-both on one cache gives
    the scores of plain passes over each order, and the swapped order runs only from where the two
    orders part (Response 1's action)."""
    from conftest import EMBEDDED_MODEL
    from data.state import State
    from judgment.format import render_pair
    from judgment.parse import swap_responses
    from llm.kvcache import common_prefix
    from llm.local import load_local_model
    from llm.scoring import _encode, prompt_text, score, score_many

    if not (EMBEDDED_MODEL / "config.json").exists():
        pytest.skip("embedded model missing: run `make setup`")
    local = load_local_model(EMBEDDED_MODEL)
    model, tok = local.model, local.tokenizer
    tree = "\n".join(["RootWebArea 'Shop'"] + [f"\t[{b}] link 'Blue Kettle {b}'" for b in range(4, 30)])
    state = State(intent="Order 2 Blue Kettles for Ada", axtree=tree, url="http://127.0.0.1:8000/",
                  history=["click('3')"])
    prompts = [render_pair(state, a1, a2, budget=300)[0] for a1, a2 in (("click('4')", "click('5')"),
                                                                       ("click('6')", "scroll(0, 200)"))]
    given, swapped = (_encode(tok, prompt_text(tok, m)) for m in (prompts[0], swap_responses(prompts[0])))
    part = common_prefix(given, swapped)          # at Response 1's action: the AXTree and all before it are shared
    ran, hook = _counting(model)
    try:
        score(model, tok, prompts[0], "score-both")
    finally:
        hook.remove()
    # one pass over the prompt as given, the swapped order from where they part, and the tags' tails
    assert sum(ran) <= len(given) + (len(given) - part) + 30, (sum(ran), len(given), part)
    for k, (p, s) in enumerate(zip(prompts, score_many(model, tok, prompts, "score-both"))):
        for tags, order in ((s.given, p), (s.swapped, swap_responses(p))):
            plain = _plain_score(model, tok, order)
            assert (tags.logprob_1, tags.logprob_2) == pytest.approx(plain, abs=5e-4), (k, order is p)
