"""MAG end to end with the real embedded SmolLM2 as policy and as PRM, through the real client,
judge, Set-of-Mark observation and executor, on the local shop in headless Chromium, then the
run's result row and Table-1 summary. No success is asserted: the model is tiny; this exercises
the real code paths (the second episode makes sure the real PRM judges real matches)."""

from pathlib import Path

import pytest
from recorders import recording_judge_for
from shop_scripts import mag_output

from harness.env import BrowserHarness, host_of
from llm import LLMConfig
from llm.embedded import default_model_dir
from prm.judge import make_judge
from search.demo_site import Shop, make_task
from search.loop import AGENT_ENDINGS
from search.mag import episode_row, summarize_run, table
from search.mag.agent import MagPolicy, run_mag_episode
from search.mag.som import MAG_ACTION_SUBSETS, VIEWPORT

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed"),
              pytest.mark.skipif(not (default_model_dir() / "config.json").exists(),
                                 reason="embedded model not prepared (make setup)")]


def test_embedded_policy_and_prm_on_mag(tmp_path):
    policy = MagPolicy(LLMConfig(temperature=1.0, max_tokens=56, cache_dir=str(tmp_path / "llm")))
    judge = make_judge(LLMConfig(max_tokens=32, cache_dir=str(tmp_path / "llm")), batch_size=4)
    judged = []
    judge_for = recording_judge_for(judge, judged)

    def with_two_valid(obs, guides, n, step):
        """The real policy's outputs plus two valid steps, so that the real PRM has a match."""
        links = [m for m in obs.marks if m.type in ("LINK", "BUTTON")]
        extra = [mag_output("click", m.id, None, f"Click {m.text}.") for m in links[:2]]
        if len(extra) < 2:
            extra.append(mag_output("scroll", None, "down", "Scroll down."))
        return policy.propose(obs, guides, n, step) + extra

    with Shop() as shop, BrowserHarness(make_task(shop), allowed_hosts={host_of(shop.url)}, viewport=VIEWPORT,
                                        action_subsets=MAG_ACTION_SUBSETS) as h:
        # one step each for the pure and the baseline episode, and as few policy samples as give
        # every episode a match (the model's time is most of this test's); the mixed one runs up to
        # two: a step after an executed one (the guides so far in the prompt)
        pure = run_mag_episode(h, policy.propose, judge_for, n=2, max_steps=1, seed=0)
        baseline = run_mag_episode(h, policy.propose, None, max_steps=1, seed=0)
        mixed = run_mag_episode(h, with_two_valid, judge_for, n=1, max_steps=2, seed=0)

    for ep in (pure, baseline, mixed):
        assert ep.termination in AGENT_ENDINGS and ep.evaluated and ep.reward in (0.0, 1.0), ep.error
        assert ep.steps and all(not s.error.startswith(("env:", "policy:")) for s in ep.steps)
        assert all(len(s.output_reasons) == len(s.outputs) for s in ep.steps)
    assert all(len(s.outputs) == 2 for s in pure.steps)
    assert all(len(s.outputs) == 1 and s.bracket["matches"] == [] for s in baseline.steps)
    assert all(len(s.outputs) == 3 and s.code is not None for s in mixed.steps)
    assert judged and all(isinstance(v.text, str) and v.text for _, v in judged)
    for s in mixed.steps:              # the bracket's winner is what ran; the PRM saw actions only
        assert s.bracket["winner"] == s.action and s.action.startswith("action_type: ")
    assert all(s.guide not in a1 + a2 for (a1, a2), _ in judged for s in mixed.steps)

    gold = {"local": ["Search for kettle.", "Open the Blue Kettle."]}
    rows = [episode_row("local", "local", "order", ep, gold) for ep in (pure, baseline, mixed)]
    summary = summarize_run(rows, gold)
    assert summary["n_tasks"] == 3 and 0.0 <= summary["OFCR"] <= 1.0 and summary["G"] is not None
    lines = table([("embedded", summary)]).splitlines()
    assert len(lines) == 5 and lines[2].split("|")[1].strip() == "embedded"
    assert lines[4].startswith("- embedded: SR: all 3 tasks")
