"""MAG App. D's teacher-forced step diagnostics, each formula pinned on hand-made cases:
A = Type * Target * Content (Target e^(-d/tau) outside the gold box under coordinates, tau = 120),
Faith (Eq. 9), Suff (Eq. 10), GACS = F * A * sqrt(Faith * Suff) (Eq. 11), SAA = mean A."""

import json
import math

import pytest

from search.mag.diagnostics import (
    GoldStep,
    anchor,
    box_distance,
    gold_steps,
    head_verb,
    score_step,
    suff_score,
    summarize_steps,
    token_f1,
)
from search.mag.som import Mark, SomObservation

MARKS = [Mark(1, "a1", "LINK", "Blue Kettle", (100, 100, 80, 20)),
         Mark(2, "a2", "LINK", "Red Kettle", (100, 140, 80, 20)),
         Mark(3, "a3", "INPUT", 'Search products = "tea"', (300, 20, 200, 30)),
         Mark(4, "a4", "LINK", "Blue Mug", (100, 180, 80, 20))]
OBS = SomObservation(goal="g", url="http://s/", marks=MARKS, menu="", screenshot_png=b"")
CLICK_BLUE = GoldStep("Open the Blue Kettle.", "click", "Blue Kettle")


def out(verb, target, content, guide, key="selected_candidate_id"):
    return json.dumps({"think": "t", "action_type": verb, key: target, "content": content, "guide_text": guide})


def test_token_f1_anchor_and_head_verb():
    assert token_f1("Blue Kettle", "the blue kettle") == pytest.approx(0.8)        # P 1, R 2/3
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0 and token_f1("a b", "c") == 0.0
    assert anchor('Click "Place order" at the bottom.') == "Place order"
    assert anchor("Click ‘Reports’ in the menu") == "Reports"
    assert anchor("Don't click the user's menu.") == "Don't click the user's menu."       # apostrophes are no quotes
    assert head_verb("Please now click the button") == "click"


def test_target_under_coordinates_decays_with_the_distance_to_the_box():
    assert box_distance(120, 110, (100, 100, 80, 20)) == 0.0
    assert box_distance(185, 110, (100, 100, 80, 20)) == 5.0
    assert box_distance(183, 124, (100, 100, 80, 20)) == 5.0                   # 3-4-5 from the corner
    s = score_step(out("click", [185, 110], None, 'Open "Blue Kettle".', "coordinates"), OBS, CLICK_BLUE, MARKS[0],
                   "coord")
    assert s["Target"] == pytest.approx(math.exp(-5 / 120)) and s["A"] == pytest.approx(math.exp(-5 / 120))
    inside = score_step(out("click", [120, 110], None, 'Open "Blue Kettle".', "coordinates"), OBS, CLICK_BLUE,
                        MARKS[0], "coord")
    assert inside["Target"] == 1.0


def test_a_right_step_with_a_precise_guide_scores_one_everywhere():
    s = score_step(out("click", "1", None, 'Open "Blue Kettle".'), OBS, CLICK_BLUE, MARKS[0])
    assert (s["F"], s["Type"], s["Target"], s["Content"], s["A"]) == (1, 1, 1, 1, 1)
    assert (s["Verb"], s["Obj"], s["Faith"], s["Suff"], s["GACS"]) == (1, 1, 1, 1, 1)


def test_the_wrong_target_zeroes_a_but_not_the_gold_free_terms():
    s = score_step(out("click", "2", None, 'Open "Red Kettle".'), OBS, CLICK_BLUE, MARKS[0])
    assert s["A"] == 0 and s["Faith"] == 1 and s["Suff"] == 1 and s["GACS"] == 0


def test_a_leaky_guide_fails_ofcr_and_gacs_but_keeps_a():
    s = score_step(out("click", "1", None, "Click [1]."), OBS, CLICK_BLUE, MARKS[0])
    assert s["F"] == 0 and s["A"] == 1 and s["GACS"] == 0 and s["reason"].startswith("guide_leak")


def test_faith_and_suff_of_a_vague_typing_guide():
    gold = GoldStep("Type kettle into the search box.", "type", "Search products", "kettle")
    s = score_step(out("type", "3", "kettle", "Search for kettles"), OBS, gold, MARKS[2])
    assert s["A"] == 1 and s["Verb"] == 1 and s["Obj"] == 0 and s["Faith"] == 0.5      # 'kettles' is not 'kettle'
    assert s["Suff"] == pytest.approx(0.4)            # F1('search for kettles', 'search products') = 0.4, no tie
    assert s["GACS"] == pytest.approx(math.sqrt(0.5 * 0.4))


def test_content_thresholds():
    gold = GoldStep("Type New York.", "type", "Search products", "New York")
    assert score_step(out("type", "3", "new york", 'Type "New York"'), OBS, gold, MARKS[2])["Content"] == 1
    assert score_step(out("type", "3", "New York City", 'Type "New York City"'), OBS, gold, MARKS[2])["Content"] == 0
    finish = GoldStep("Read the order number.", "finish", None, "A-100")
    half = score_step(out("finish", None, "Your order number is A-100", "Report the order number."), OBS, finish, None)
    assert half["Content"] == 1 and half["Target"] == 1          # F1 = 0.5, the finish threshold
    assert score_step(out("finish", None, "It is A-101", "Report it."), OBS, finish, None)["Content"] == 0


def test_suff_floor_and_ties():
    texts = [m.text.split(' = "')[0] for m in MARKS]
    assert suff_score('Open "Blue Kettle"', "click", texts) == 1.0
    assert suff_score('Open the "Kettle"', "click", texts) == pytest.approx(2 / 3 * 0.5)     # Blue / Red tie
    assert suff_score('Open "Teapot"', "click", texts) == 0.0                                 # below the floor
    assert suff_score("Scroll down to the reviews.", "scroll", texts) == 1.0
    assert suff_score("Look further down.", "scroll", texts) == 0.5          # no clear head verb


def test_an_invalid_output_scores_zero_and_saa_is_the_mean_of_a():
    bad = score_step("not json", OBS, CLICK_BLUE, MARKS[0])
    assert all(bad[k] == 0 for k in ("F", "A", "Faith", "Suff", "GACS"))
    good = score_step(out("click", "1", None, 'Open "Blue Kettle".'), OBS, CLICK_BLUE, MARKS[0])
    d = summarize_steps([good, bad], tasks=1, skipped=["x"])
    assert d["SAA"] == 0.5 and d["GACS"] == 0.5 and d["n_steps"] == 2 and d["tasks_without_gold_actions"] == ["x"]


def test_gold_steps_need_actions():
    assert gold_steps({"steps": [{"guide": "g"}]}) is None
    assert gold_steps({"steps": [{"guide": "g", "action_type": "click"}]}) is None        # no target
    assert gold_steps({"steps": [{"guide": "g", "action_type": "scroll", "content": "down"}]})[0].content == "down"
