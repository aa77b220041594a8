"""The real embedded SmolLM2 as policy and as PRM, through the real client and judge, drives
episodes on the local shop in headless Chromium without errors (no success asserted: the model is
tiny; this exercises the real code paths). The third episode adds two valid scripted candidates
to the policy's own, so that the real PRM judges real matches and its picks are what runs."""

from pathlib import Path

import pytest
from recorders import Recording, recording_judge_for

from harness.env import host_of
from llm import LLMConfig
from llm.embedded import default_model_dir
from prm.judge import make_judge
from search.agent import Policy, run_axtree_episode
from search.demo_site import Shop, make_task
from search.loop import AGENT_ENDINGS

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed"),
              pytest.mark.skipif(not (default_model_dir() / "config.json").exists(),
                                 reason="embedded model not prepared (make setup)")]


def test_embedded_policy_and_prm_complete_episodes(tmp_path):
    policy = Policy(LLMConfig(temperature=1.0, max_tokens=40, cache_dir=str(tmp_path / "llm")), budget=1500)
    judge = make_judge(LLMConfig(max_tokens=32, cache_dir=str(tmp_path / "llm")), batch_size=4)
    judged = []
    judge_for = recording_judge_for(judge, judged)

    def with_two_valid(obs, history, feedback, n, step):
        """The real policy's candidates plus two valid ones, so that the real PRM has a match."""
        return policy.propose(obs, history, feedback, n, step) + ["scroll(0, 200)", "scroll(0, -200)"]

    with Shop() as shop, Recording(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        # one step each for the guided and the baseline episode (the model's time is most of this
        # test's); the mixed one runs up to two: a step after an executed one (the history and feedback in the prompt)
        guided = run_axtree_episode(h, policy.propose, judge_for, n=3, max_steps=1, seed=0)
        baseline = run_axtree_episode(h, policy.propose, None, max_steps=1, seed=0)
        h.executed.clear()
        mixed = run_axtree_episode(h, with_two_valid, judge_for, n=2, max_steps=2, seed=0)
    for r in (guided, baseline, mixed):
        assert r.termination in AGENT_ENDINGS and r.evaluated and r.reward in (0.0, 1.0), r.error
        assert r.steps and all(not s.error.startswith(("env:", "policy:")) for s in r.steps)
    assert all(len(s.candidates) == 3 for s in guided.steps)
    assert all(len(s.candidates) == 1 and s.bracket["matches"] == [] for s in baseline.steps)
    # the real PRM judged real matches: every judgment is the model's text, the recorded verdicts
    # are the judge's, each match's winner is one of its pair, and the bracket's winner is what ran
    assert all(len(s.candidates) == 4 and s.chosen is not None for s in mixed.steps)
    assert h.executed == [s.chosen for s in mixed.steps]
    matches = [m for s in mixed.steps for m in s.bracket["matches"]]
    assert matches and len(judged) == sum(s.judge_calls for s in guided.steps + mixed.steps)
    verdicts = {pair: v for pair, v in judged}
    for m in matches:
        v = verdicts[(m["a1"], m["a2"])]
        assert isinstance(v.text, str) and v.text.strip() and m["judgment"] == v.text
        assert m["verdict"] == v.verdict and m["winner"] in (m["a1"], m["a2"])
        assert m["winner"] == (m["a2"] if v.verdict == 2 else m["a1"])
    for s in mixed.steps:
        assert s.judge_calls == len(s.bracket["matches"]) >= 1 and s.bracket["winner"] == s.chosen
