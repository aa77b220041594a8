"""harness.solvers in harness.miniwob's browser (real Chromium, the miniwob wheel's pages): from
the page another action left (an unwanted box checked, a wrong word typed) the solver still
finishes with the task's reward 1; an action on a made-up bid is an error the page reports."""

from pathlib import Path

import pytest

from harness.miniwob import miniwob_harness
from harness.solvers import solve_step

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def finish(h, obs, task: str, max_steps: int = 10) -> list[str]:
    """Let the solver act until the task ends the episode; the actions it took."""
    taken = []
    while not h.task_done and len(taken) < max_steps:
        action = solve_step(task, obs.goal, obs.axtree)
        assert action is not None, obs.axtree
        obs = h.step(action)
        assert not obs.last_action_error, obs.last_action_error
        taken.append(action)
    return taken


def test_the_solver_finishes_after_a_wrong_action():
    with miniwob_harness("miniwob.click-checkboxes") as h:
        obs = h.reset(seed=1)               # Select Jc, s6WcI, XMHY, HJ6c: 0QW is not wanted
        bid = next(l.split("]")[0].strip("\t[") for l in obs.axtree.splitlines() if "checkbox '0QW'" in l)
        obs = h.step(f"click('{bid}')")
        assert "checkbox '0QW', focused, checked='true'" in obs.axtree and not h.task_done
        taken = finish(h, obs, "click-checkboxes")
        assert len(taken) == 6 and taken[3] == f"click('{bid}')"      # four to check, 0QW to uncheck, Submit
        assert h.task_done and h.reward == 1.0 and h.evaluate()[0] == 1.0
        obs = h.reset(seed=1)               # the same seed draws the same page again
        assert "checkbox '0QW', checked='false'" in obs.axtree and not h.task_done and h.reward == 0.0
    with miniwob_harness("enter-text") as h:
        obs = h.reset(seed=0)               # Enter "Myron"
        box = solve_step("enter-text", obs.goal, obs.axtree).split("'")[1]
        obs = h.step(f"fill('{box}', 'Myrna')")
        assert finish(h, obs, "enter-text") == [f"fill('{box}', 'Myron')", "click('15')"] and h.reward == 1.0


def test_a_made_up_bid_is_an_error_and_a_wrong_submit_ends_with_reward_0():
    with miniwob_harness("click-button") as h:
        obs = h.reset(seed=0)               # Click on the "no" button
        obs = h.step("click('999')")
        assert obs.last_action_error and not h.task_done
        obs = h.step("click('15')")         # "Ok"
        assert h.task_done and h.reward == 0.0 and h.evaluate()[0] == 0.0


def test_rich_solvers_finish_on_their_pages():
    with miniwob_harness("search-engine") as h:
        obs = h.reset(seed=0)               # "Kasie", the 4th result: page 2
        obs = h.step(solve_step("search-engine", obs.goal, obs.axtree))          # types the name
        obs = h.step(solve_step("search-engine", obs.goal, obs.axtree))          # searches
        page3 = next(l.split("]")[0].strip("\t[") for l in obs.axtree.splitlines() if "link '3'" in l)
        obs = h.step(f"click('{page3}')")   # another action turned to page 3
        taken = finish(h, obs, "search-engine")
        # back to page 2, then the result, clicked with Alt: the URL stays, so the validator scores it
        assert len(taken) == 2 and "modifiers=['Alt']" in taken[1] and h.reward == 1.0
    with miniwob_harness("navigate-tree") as h:
        obs = h.reset(seed=1)               # the file is inside a closed folder
        assert len(finish(h, obs, "navigate-tree")) >= 2 and h.reward == 1.0


def test_a_plain_div_with_a_click_handler_prints_alike_in_both_harnesses_and_the_solver_clicks_it():
    from browsergym.utils.obs import flatten_axtree_to_str

    from teacher.replay import state_hash

    with miniwob_harness("email-inbox") as h:
        obs = h.reset(seed=0)               # reply to Carlynne: her email's line is a plain div
        plain = flatten_axtree_to_str(h.last_obs["axtree_object"])
    with miniwob_harness("email-inbox", lean=True) as h:
        lean = h.reset(seed=0)
        # BrowserGym's text skips the div; ours prints it, the replay's O_t check takes it out again
        assert lean.axtree == obs.axtree != plain and state_hash(obs.axtree) == state_hash(plain)
        first = solve_step("email-inbox", lean.goal, lean.axtree)
        assert f"[{first[7:-2]}] generic, clickable=True" in lean.axtree
        for _ in range(8):      # from the page as it is: a click that timed out on a loaded machine is tried again
            if h.task_done:
                break
            lean = h.step(solve_step("email-inbox", lean.goal, lean.axtree))
        assert h.reward == 1.0
