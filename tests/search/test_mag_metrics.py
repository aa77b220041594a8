"""MAG output contract, tolerant parser, leak regexes, OFCR, BLEU/ROUGE/G/GGS on hand-worked
examples, and the gold-guide JSONL loader."""

import json
import math

import pytest

from search.mag_metrics import (check_step, ggs, guide_leaks, guide_scores, load_gold_guides, ofcr,
                        parse_step, score_episodes, score_task, summarize)

MENU = [3, 12, 17]


def out(**kw):
    base = dict(think="The cart link is at the top.", action_type="click", selected_candidate_id=12,
                content="", guide_text="Click the 'Cart' link at the top of the page.")
    base.update(kw)
    return json.dumps(base)


# ---- parser on realistic outputs -------------------------------------------------------------

def test_parse_plain_object():
    step, err = parse_step(out(), MENU)
    assert err is None and step.action_type == "click" and step.candidate_id == 12
    assert step.guide_text.startswith("Click the 'Cart'")


def test_parse_code_fence_and_preamble():
    text = "Sure! Looking at the screenshot, I will open the cart.\n```json\n" + out() + "\n```\nDone."
    step, err = parse_step(text, MENU)
    assert err is None and step.candidate_id == 12


def test_parse_preamble_with_stray_braces_and_braces_in_strings():
    # "{action}" in the preamble is not JSON and is skipped; braces inside strings do not count.
    text = "I answer in the form {action}: " + out(think="use {x} and } braces", guide_text="Click 'Cart'.")
    step, err = parse_step(text, MENU)
    assert err is None and step.think == "use {x} and } braces"


def test_parse_two_objects_takes_the_first():
    text = out(selected_candidate_id=3, guide_text="Open the menu.") + "\n" + out(selected_candidate_id=17)
    step, err = parse_step(text, MENU)
    assert err is None and step.candidate_id == 3 and step.guide_text == "Open the menu."


def test_parse_first_wellformed_object_wins_even_if_invalid():
    # The first well-formed object lacks keys; a valid later one does not rescue the step.
    text = '{"note": "plan"} ' + out()
    assert parse_step(text, MENU) == (None, "missing_keys: action_type, content, guide_text, "
                                            "selected_candidate_id, think")


def test_parse_broken_json_then_fixed_object():
    broken = out()[:-1] + ',}'          # trailing comma: not JSON
    step, err = parse_step(broken + "\nOops, corrected:\n" + out(selected_candidate_id=17), MENU)
    assert err is None and step.candidate_id == 17


@pytest.mark.parametrize("text, category", [
    ("", "no_json"),
    ("I think I should click the cart.", "no_json"),
    ('{"think": "x", "action_type": "click", ', "no_json"),          # truncated generation
    (None, "no_json"),
    (json.dumps({"think": "", "action_type": "click", "selected_candidate_id": 12, "content": ""}),
     "missing_keys"),
    (out(extra="x"), "extra_keys"),
    (out(action_type="hover"), "bad_verb"),
    (out(action_type=3), "bad_verb"),
    (out(selected_candidate_id=99), "id_not_in_menu"),
    (out(selected_candidate_id=None), "bad_target"),
    (out(selected_candidate_id=True), "bad_target"),
    (out(selected_candidate_id="twelve"), "bad_target"),
    (out(action_type="type", content=""), "missing_content"),
    (out(action_type="select", content=None), "missing_content"),
    (out(action_type="finish", content="  "), "missing_content"),
    (out(action_type="scroll", content="sideways", selected_candidate_id=None), "bad_content"),
    (out(content=5), "bad_content"),
    (out(guide_text=""), "missing_guide"),
    (out(guide_text=None), "missing_guide"),
    (out(think=["a"]), "bad_think"),
])
def test_parse_rejections(text, category):
    step, err = parse_step(text, MENU)
    assert step is None and err.split(":")[0] == category


def test_parse_verb_rules_accepted():
    ok = [
        out(action_type="Type ", content="iphone 15", selected_candidate_id="17"),  # digit string id
        out(action_type="select", content="Size M", selected_candidate_id=3),
        out(action_type="scroll", content="Down", selected_candidate_id=None),
        out(action_type="press_enter", selected_candidate_id=None),
        out(action_type="go_back", selected_candidate_id=999),                # target ignored
        out(action_type="finish", content="$42.10", selected_candidate_id=None),
    ]
    steps = [parse_step(t, MENU) for t in ok]
    assert all(err is None for _, err in steps), steps
    typ, _, scroll, enter, back, fin = (s for s, _ in steps)
    assert typ.action_type == "type" and typ.candidate_id == 17 and typ.content == "iphone 15"
    assert scroll.content == "down" and scroll.candidate_id is None
    assert enter.candidate_id is None and back.candidate_id is None and fin.content == "$42.10"
    # an optional target that is given must still be in the menu
    assert parse_step(out(action_type="press_enter", selected_candidate_id=99), MENU)[1].startswith("id_not_in_menu")


def test_parse_coordinate_grounding():
    def cout(**kw):
        d = json.loads(out(**kw))
        d["coordinates"] = d.pop("selected_candidate_id")
        return json.dumps(d)
    step, err = parse_step(cout(selected_candidate_id=[312.4, 174]), (), grounding="coord")
    assert err is None and step.coords == (312, 174) and step.candidate_id is None
    assert parse_step(cout(selected_candidate_id=[1500, 10]), (), "coord")[1].startswith("bad_target")
    assert parse_step(cout(selected_candidate_id=12), (), "coord")[1].startswith("bad_target")
    assert parse_step(out(), MENU, "coord")[1].startswith("missing_keys: coordinates")
    assert parse_step(out(), MENU, "pixels")[1].startswith("bad_grounding")


# ---- leak regex family -----------------------------------------------------------------------

@pytest.mark.parametrize("guide, name", [
    ("Click element 17 to open the cart.", "mark_word"),
    ("Click [17].", "mark_bracket"),
    ("Click the button at (312, 174).", "coord_pair"),
    ("Press the link [ 4 ] in the header.", "mark_bracket"),
    ("Select id 12 from the list.", "mark_word"),
    ("Choose mark #3.", "mark_word"),
    ("Click box: 9.", "mark_word"),
    ("Click #12 to continue.", "mark_hash"),
    ("Tap at [312.5, 174].", "coord_pair"),
    ("Click at x=312, y=174.", "coord_xy"),
    ("Open order #170, then click element 17.", "mark_word"),
])
def test_leak_positives(guide, name):
    assert name in guide_leaks(guide)


@pytest.mark.parametrize("guide", [
    "Click the 'Add to Cart' button below the product photo.",
    "Type 'iphone 15' into the search box and press Enter.",
    "Set the quantity to 2.",
    "Open issue #12 in the a11yproject repository.",
    "Open order #000000170 from the order list.",
    "Go to page 3 of the results (sorted by price).",
    "Scroll down to the reviews, under the 'Details' tab.",
    "Pick the size M option from the dropdown.",
    "Select the 2023-01-05 entry.",
    "Find order id 170 and open it.",
    "Open product ID 42 from the catalog.",
    "Reply to post id: 9 in the forum.",
])
def test_leak_negatives(guide):
    assert guide_leaks(guide) == []


# ---- OFCR ------------------------------------------------------------------------------------

def test_ofcr_on_fixture_episode():
    outputs = [
        out(),                                                     # compliant
        "```json\n" + out(action_type="type", content="shoes", selected_candidate_id=17) + "\n```",
        out(guide_text="Click element 12."),                      # valid action, leaky guide
        out(selected_candidate_id=40),                             # id not in menu
        "I will finish now.",                                      # no JSON
    ]
    checked = [check_step(t, MENU) for t in outputs]
    reasons = [r for _, r in checked]
    assert reasons[:2] == [None, None]
    assert reasons[2] == "guide_leak: mark_word" and checked[2][0] is not None   # still executed
    assert reasons[3].startswith("id_not_in_menu") and reasons[4].startswith("no_json")
    assert ofcr(reasons) == pytest.approx(2 / 5)
    assert ofcr([]) is None


def test_score_episodes_pools_ofcr_and_counts_reasons():
    eps = [{"task_id": 7, "success": 1, "outputs": [(out(), MENU), (out(selected_candidate_id=1), MENU)]},
           {"task_id": "8", "success": 0, "outputs": [(out(guide_text="Click [3]."), MENU)]}]
    scores = score_episodes(eps, gold=None)
    assert [s.ofcr for s in scores] == [0.5, 0.0]
    summ = summarize(scores)
    # pooled over steps: 1 compliant of 3, not the mean of per-task rates (0.25)
    assert summ["OFCR"] == pytest.approx(1 / 3) and summ["SR"] == 0.5
    assert summ["reasons"] == {"id_not_in_menu": 1, "guide_leak": 1}
    assert summ["n_with_gold"] == 0 and "G" not in summ and "GGS" not in summ   # success and OFCR only


# ---- BLEU / ROUGE / G / GGS on hand-worked examples ------------------------------------------

def test_identical_guides_give_one():
    s = guide_scores(["Open the Orders page.", "Click the first order."],
                     ["Open the Orders page.", "Click the first order."])
    assert s == pytest.approx(dict(bleu1=1, bleu2=1, rouge1=1, rougeL=1, G=1))


def test_disjoint_guides_give_zero():
    # No shared unigram: nltk returns 0 before smoothing applies; ROUGE has no overlap.
    s = guide_scores(["Open settings"], ["Click cart button"])
    assert s == pytest.approx(dict(bleu1=0, bleu2=0, rouge1=0, rougeL=0, G=0))
    assert guide_scores([], ["Click cart"])["G"] == 0 and guide_scores(["x"], [])["G"] == 0


def test_partial_overlap_equal_length():
    # pred "click the red button" vs gold "click the blue button" (4 tokens each, BP = 1)
    # BLEU-1: unigram matches click, the, button = 3/4 = 0.75
    # BLEU-2: bigram precision: "click the" of {click the, the red, red button} = 1/3;
    #         sqrt(0.75 * 1/3) = sqrt(0.25) = 0.5
    # ROUGE-1: overlap 3, P = R = 3/4 -> F = 0.75
    # ROUGE-L: LCS "click the button" = 3 -> F = 0.75
    # G = (0.75 + 0.5 + 0.75 + 0.75) / 4 = 0.6875
    s = guide_scores(["Click the red button."], ["Click the blue button."])
    assert s == pytest.approx(dict(bleu1=0.75, bleu2=0.5, rouge1=0.75, rougeL=0.75, G=0.6875))
    # GGS = 1 * (0.4 + 0.6 * 0.6875) = 0.8125; tax = 1 - 0.8125 = 0.1875
    t = score_task(5, 1, [None], ["Click the red button."], ["Click the blue button."])
    assert (t.G, t.GGS, t.tax) == pytest.approx((0.6875, 0.8125, 0.1875))
    f = score_task(6, 0, [None], ["Click the red button."], ["Click the blue button."])
    assert (f.GGS, f.tax) == (0.0, 0.0)


def test_short_prediction_brevity_penalty_and_smoothing():
    # pred "click button" (2) vs gold "click the blue button" (4)
    # BP = exp(1 - 4/2) = e^-1;  p1 = 2/2 = 1  -> BLEU-1 = e^-1 = 0.36788
    # p2: bigram "click button" unmatched, 0/1 -> method1 epsilon 0.1/1 = 0.1
    #     BLEU-2 = e^-1 * sqrt(1 * 0.1) = 0.11633
    # ROUGE-1: overlap 2, P = 1, R = 0.5 -> F = 2/3;  ROUGE-L: LCS 2 -> F = 2/3
    s = guide_scores(["click button"], ["click the blue button"])
    e = math.exp(-1)
    assert s["bleu1"] == pytest.approx(e)
    assert s["bleu2"] == pytest.approx(e * math.sqrt(0.1))
    assert s["rouge1"] == pytest.approx(2 / 3) and s["rougeL"] == pytest.approx(2 / 3)
    assert s["G"] == pytest.approx((e + e * math.sqrt(0.1) + 4 / 3) / 4)


def test_ggs_formula():
    assert ggs(1, 1) == 1 and ggs(1, 0) == pytest.approx(0.4) and ggs(0, 0.9) == 0


def test_summary_with_gold_has_table_columns():
    gold = {"1": ["Click the blue button."], "2": ["Open the cart."]}
    eps = [{"task_id": 1, "success": 1, "outputs": [(out(guide_text="Click the red button."), MENU)]},
           {"task_id": 2, "success": 0, "outputs": [(out(guide_text="Open the cart."), MENU)]},
           {"task_id": 3, "success": 1, "outputs": [(out(), MENU)]}]              # no gold for 3
    summ = summarize(score_episodes(eps, gold))
    assert summ["n_tasks"] == 3 and summ["SR"] == pytest.approx(2 / 3) and summ["n_with_gold"] == 2
    # task 1: G = 0.6875, GGS = 0.8125; task 2: G = 1, GGS = 0 (failed)
    assert summ["G"] == pytest.approx((0.6875 + 1) / 2)
    assert summ["GGS"] == pytest.approx(0.8125 / 2)
    assert summ["tax"] == pytest.approx(0.5 - 0.8125 / 2)          # SR over gold tasks - GGS
    assert {"bleu1", "bleu2", "rouge1", "rougeL"} <= summ.keys()


# ---- gold-guide JSONL ------------------------------------------------------------------------

def test_load_gold_guides(tmp_path):
    p = tmp_path / "gold.jsonl"
    p.write_text('{"task_id": 27, "steps": [{"guide": "Open Orders.", "action": "click"}, {"guide": " Pick the first. "}]}\n'
                 '\n{"task_id": "wa_44", "steps": [{"guide": "Search for shoes."}]}\n')
    assert load_gold_guides(p) == {"27": ["Open Orders.", "Pick the first."], "wa_44": ["Search for shoes."]}
    assert load_gold_guides(None) is None


@pytest.mark.parametrize("line, msg", [
    ("not json", "not JSON"),
    ('{"steps": [{"guide": "x"}]}', "task_id"),
    ('{"task_id": true, "steps": [{"guide": "x"}]}', "task_id"),
    ('{"task_id": 1, "steps": []}', "non-empty list"),
    ('{"task_id": 1, "steps": [{"text": "x"}]}', "step 0"),
    ('{"task_id": 1, "steps": [{"guide": "ok"}, {"guide": ""}]}', "step 1"),
    ('{"task_id": 1, "steps": [{"guide": "a"}]}\n{"task_id": "1", "steps": [{"guide": "b"}]}', "repeated"),
])
def test_load_gold_guides_errors(tmp_path, line, msg):
    p = tmp_path / "gold.jsonl"
    p.write_text(line + "\n")
    with pytest.raises(ValueError, match=msg):
        load_gold_guides(p)


def test_load_gold_guides_missing_path_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_gold_guides(tmp_path / "nope.jsonl")
