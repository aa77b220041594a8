"""The real embedded SmolLM2 as policy and as PRM, through the real client and judge, drives
episodes on the local shop in headless Chromium without errors (no success asserted: the model is
tiny; this exercises the real code paths)."""

from pathlib import Path

import pytest

from search.demo_site import Shop, make_task
from prm.judge import make_judge
from search.agent import Policy
from search.env import BrowserHarness, host_of
from search.loop import AGENT_ENDINGS, run_episode
from search.tournament import prm_pair_judge
from llm.embedded import default_model_dir
from llm import LLMConfig
from data.judgment import State

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed"),
              pytest.mark.skipif(not (default_model_dir() / "config.json").exists(),
                                 reason="embedded model not prepared (make setup)")]


def test_embedded_policy_and_prm_complete_episodes(tmp_path):
    policy = Policy(LLMConfig(temperature=1.0, max_tokens=40, cache_dir=str(tmp_path / "llm")), budget=1500)
    judge = make_judge(LLMConfig(max_tokens=32, cache_dir=str(tmp_path / "llm")), batch_size=4)

    def judge_for(obs, history):
        return prm_pair_judge(judge, State(intent=obs.goal, axtree=obs.axtree, url=obs.url, history=list(history)),
                              budget=1500)

    with Shop() as shop, BrowserHarness(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        guided = run_episode(h, policy.propose, judge_for, n=3, max_steps=2, seed=0)
        baseline = run_episode(h, policy.propose, None, max_steps=2, seed=0)
    for r in (guided, baseline):
        assert r.termination in AGENT_ENDINGS and r.evaluated and r.reward in (0.0, 1.0), r.error
        assert r.steps and all(not s.error.startswith(("env:", "policy:")) for s in r.steps)
    assert all(len(s.candidates) == 3 for s in guided.steps)
    assert all(len(s.candidates) == 1 and s.bracket["matches"] == [] for s in baseline.steps)
    judged = [m for s in guided.steps for m in s.bracket["matches"]]
    assert all(m["judgment"] is not None for m in judged)
