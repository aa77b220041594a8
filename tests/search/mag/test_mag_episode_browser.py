"""MAG episodes end to end in headless Chromium on the local shop: a scripted policy writes N
JSON outputs per step (the right step among malformed, off-menu, leaky and wrong ones), a
scripted judge prefers the right one; the loop must execute exactly the judge's picks, keep the
guides, count compliance per step and succeed. The unguided baseline runs one output per step;
a step without a valid output executes nothing, uses budget and keeps its guide. A coordinate
episode sees exactly the SoM episode's observations."""

import json
from pathlib import Path

import pytest
import recorders
from shop_scripts import GUIDES, mag_output, right_output_for

from harness.env import host_of
from search.demo_site import Shop, make_task
from search.mag.agent import run_mag_episode
from search.mag.metrics import check_step, ofcr, score_task
from search.mag.som import MAG_ACTION_SUBSETS, VIEWPORT, to_code

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def scripted_policy(obs, guides, n, step):
    right = right_output_for(obs)
    home = next(m.id for m in obs.marks if m.type == "LINK" and m.text == "Home")
    leaky = json.loads(right)
    leaky["guide_text"] = f"Use element {leaky['selected_candidate_id'] or 1} now."
    return [f"Sure! ```json\n{mag_output('click', home, None, 'Go back home.')}\n```",   # wrong, fenced
            mag_output("click", 999, None, "Click something."),                     # not in menu
            "I would click the button",                                              # no JSON
            json.dumps(leaky),                                                       # leaky guide
            "Here it is: " + right][:n]


def right_action(obs) -> str:
    """The right step as the PRM sees it."""
    step, _ = check_step(right_output_for(obs), obs.menu_ids)
    return to_code(step, obs)[1]


def picks_right(calls):
    def judge_for(obs, history):
        right = right_action(obs)

        def judge(pairs):
            calls.append(len(pairs))
            return [(2 if a2 == right else 1, "") for a1, a2 in pairs]
        return judge
    return judge_for


def Recording(*a, **k):
    return recorders.Recording(*a, viewport=VIEWPORT, action_subsets=MAG_ACTION_SUBSETS, **k)


def test_mag_episode_executes_the_judges_picks_and_succeeds():
    calls, seen = [], []
    with Shop() as shop, Recording(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        ep = run_mag_episode(h, scripted_policy, picks_right(calls), n=5, seed=3,
                             on_step=lambda s, o: seen.append((s.step, o.url)))
        orders = list(shop.orders)
    assert ep.termination == "answered" and ep.evaluated and ep.reward == 1.0, (ep.error, [s.error for s in ep.steps])
    assert orders == [{"item": "kettle-blue", "name": "Ada", "qty": "2", "number": "A-100"}]
    assert ep.answer == "Your order number is A-100"
    assert h.executed == [s.code for s in ep.steps] and len(ep.steps) == 8
    assert [s for s, _ in seen] == list(range(8))
    for s in ep.steps:
        assert s.reason is None and s.chosen == 4          # the right, clean output won
        dropped = [c["dropped"] for c in s.bracket["candidates"]]
        assert dropped[1].startswith("invalid: id_not_in_menu") and dropped[2].startswith("invalid: no_json")
        assert dropped[0] is None and s.output_reasons[3].startswith("guide_leak")
        # the leaky output is the same page action as the right one: the compliant one represents both
        assert dropped[3] == "duplicate of 4" and s.bracket["candidates"][4]["count"] == 2
    assert ep.guides == GUIDES
    assert h.executed[1] == "keyboard_press('Enter')"
    assert any(c.startswith("select_option(") and "'2'" in c for c in h.executed)
    assert h.executed[-1] == "send_msg_to_user('Your order number is A-100')"
    assert ofcr(ep.reasons) == 1.0
    assert calls == [1] * 8                                # home link vs the right step, one batch each
    score = score_task("shop", ep.reward, ep.reasons, ep.guides, ep.guides)
    assert score.G == pytest.approx(1.0) and score.GGS == pytest.approx(1.0) and score.tax == pytest.approx(0.0)


def test_baseline_runs_one_output_and_invalid_steps_use_budget():
    histories = []

    def policy(obs, guides, n, step):
        assert n == 1
        histories.append(list(guides))
        if step == 0:       # an id not in the menu: no action, but a guide (it joins the history and G)
            return [mag_output("click", 999, None, "Open the search box.")]
        if step == 1:
            return ["nothing"]
        return [right_output_for(obs), "never seen"]

    with Shop() as shop, Recording(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        ep = run_mag_episode(h, policy, None, max_steps=5)
    assert ep.termination == "step_budget" and ep.evaluated and ep.reward == 0.0
    assert len(ep.steps) == 5 and len(h.executed) == 3            # two invalid steps executed nothing
    assert [s.code is None for s in ep.steps] == [True, True, False, False, False]
    assert ep.steps[0].reason == "id_not_in_menu: 999" and ep.steps[1].reason.startswith("no_json")
    assert ep.steps[0].not_executed.startswith("invalid: id_not_in_menu")
    assert all(len(s.outputs) == 1 and s.bracket["matches"] == [] for s in ep.steps)
    assert ofcr(ep.reasons) == pytest.approx(3 / 5)
    assert ep.guides == ["Open the search box."] + GUIDES[:3]
    assert histories[1] == histories[2] == ["Open the search box."]


def as_coordinates(output: str, obs) -> str:
    """A Set-of-Mark output turned into its coordinate form: the centre of the mark it names."""
    d = json.loads(output)
    cid = d.pop("selected_candidate_id")
    d["coordinates"] = list(obs.by_id[int(cid)].center) if d["action_type"] in ("click", "type", "select") else None
    return json.dumps(d)


def test_a_coordinate_episode_sees_the_same_observation_as_the_som_one():
    """The same task under both groundings, the right step each time: every observation the
    coordinate policy gets has the SoM one's marks, menu and marked screenshot."""
    import io

    from PIL import Image, ImageChops

    seen = {"som": [], "coord": []}

    def policy(grounding):
        def propose(obs, guides, n, step):
            seen[grounding].append(obs)
            right = right_output_for(obs)
            return [right if grounding == "som" else as_coordinates(right, obs)]
        return propose

    episodes = {}
    with Shop() as shop:
        for grounding in ("som", "coord"):
            with Recording(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
                episodes[grounding] = run_mag_episode(h, policy(grounding), None, grounding=grounding, max_steps=10)
    som, coord = episodes["som"], episodes["coord"]
    assert som.reward == 1.0 and coord.reward == 1.0, ([s.error for s in coord.steps], coord.error)
    assert [s.reason for s in coord.steps] == [None] * 8 and coord.guides == GUIDES
    assert [s.action for s in coord.steps] == [s.action for s in som.steps]     # the PRM's view is the same too
    assert any(s.code.startswith("mouse_click(") for s in coord.steps)
    assert len(seen["som"]) == len(seen["coord"]) == 8
    for a, b in zip(seen["som"], seen["coord"]):
        assert a.menu == b.menu and a.menu.startswith("[1] ")
        assert [(m.id, m.bid, m.type, m.text, m.box) for m in a.marks] == [(m.id, m.bid, m.type, m.text, m.box)
                                                                             for m in b.marks]
        img_a, img_b = (Image.open(io.BytesIO(o.screenshot_png)).convert("RGB") for o in (a, b))
        assert img_a.size == img_b.size == (1440, 900)
        diff = ImageChops.difference(img_a, img_b).convert("L").point(lambda v: 255 if v else 0)
        assert diff.histogram()[255] < 200          # at most a blinking caret apart
