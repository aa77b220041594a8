"""The search loop end to end in headless Chromium on a local shop: a scripted policy proposes
N candidates (the right action among distractors, invalid bids and duplicates), a scripted judge
prefers the right one, and the loop must execute exactly the judge's picks and succeed."""

from pathlib import Path

import pytest
from recorders import Recording
from shop_scripts import find, right_action

from harness.env import BrowserHarness, host_of
from harness.robust import Robustness
from search.agent import run_axtree_episode
from search.demo_site import Shop, make_task

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def scripted_policy(obs, history, feedback, n, step):
    right = right_action(obs)
    home = find(obs.axtree, "link", "Home")
    # distractors first: a wrong link, a hallucinated bid, garbage, a duplicate of the right one
    return [f"click('{home}')", "click('9999')", "I think I should click", right,
            right.replace("(", "( ", 1)][:n]


def scripted_judge_for(calls):
    def judge_for(obs, history):
        right = right_action(obs)

        def judge(pairs):
            calls.append(len(pairs))
            return [(2 if a2 == right else 1, f"prefers {right}") for a1, a2 in pairs]
        return judge
    return judge_for


def test_loop_executes_the_judges_picks_and_succeeds():
    calls = []
    with Shop() as shop, Recording(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        result = run_axtree_episode(h, scripted_policy, scripted_judge_for(calls), n=5, max_steps=12, seed=1)
        orders = list(shop.orders)
    assert result.termination == "answered", (result.error, [s.error for s in result.steps])
    assert result.evaluated and result.reward == 1.0 and result.success
    assert orders == [{"item": "kettle-blue", "name": "Ada", "qty": "2", "number": "A-100"}]
    assert h.executed == [s.chosen for s in result.steps]
    assert len(result.steps) == 8 and result.answer == "Your order number is A-100"
    for s in result.steps:
        b = s.bracket
        # 2 survivors (the wrong link and the right action) -> 1 match; the judge's pick won it
        assert all(m["winner"] == s.chosen for m in b["matches"] if s.chosen in (m["a1"], m["a2"]))
        assert [c["dropped"] is None for c in b["candidates"]] == [True, False, False, True, False]
        assert len(b["matches"]) == 1 and b["rounds"] == 1 and b["candidates"][3]["count"] == 2
        assert s.chosen not in ("click('9999')",) and s.feedback
    assert calls and calls == [1] * len(result.steps)
    # feedback compares the states before and after
    assert "navigated from" in result.steps[1].feedback
    assert "did not navigate" not in result.steps[0].feedback


def test_feedback_refusal_and_terminations():
    def bad_policy(obs, history, feedback, n, step):
        if step == 0:
            return ["goto('http://example.com/')"]
        if step == 1:
            return ["click('9999')"]
        return ["scroll(0, 400)"]

    with Shop() as shop, Recording(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        result = run_axtree_episode(h, bad_policy, None, n=5, max_steps=4, seed=0, max_format_errors=2)
        assert result.steps[0].error.startswith("refused: goto('http://example.com/')")
        assert h.executed[0] == "scroll(0, 400)"          # neither the refused goto nor the bad bid ran
        assert "scroll did not move" in result.steps[2].feedback
        assert result.termination == "step_budget" and result.evaluated and result.reward == 0.0

        result = run_axtree_episode(h, lambda *a: ["nonsense"], None, max_steps=5, max_format_errors=2)
        assert result.termination == "format_errors" and len(result.steps) == 2 and result.reward == 0.0

    with Shop() as shop:
        dead = shop.url
    harness = BrowserHarness(make_task(Shop()), task_kwargs={"start_url": dead},
                             robustness=Robustness(start_retries=1, backoff_s=0.05))     # retries: harness tests
    with harness:
        result = run_axtree_episode(harness, bad_policy, None)
    assert result.termination == "site_unreachable" and result.reward is None and not result.evaluated
    assert "after 2 attempts" in result.error and [d["attempt"] for d in harness.diagnostics] == [0, 1]
