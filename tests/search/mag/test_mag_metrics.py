"""MAG output contract and OFCR clause by clause (App. D) on hand-written outputs under both
groundings, the tolerant parser, the leak regexes, BLEU/ROUGE/G/GGS on hand-worked examples with
the paper's denominators, and the gold-guide JSONL loader."""

import json
import math

import pytest

from search.mag import check_step
from search.mag.metrics import (
    ggs,
    guide_leaks,
    guide_scores,
    load_gold_guides,
    ofcr,
    parse_step,
    raw_guide,
    score_episodes,
    score_task,
    summarize,
)

MENU = [3, 12, 17]
TARGET = {"som": 12, "coord": [312, 174]}       # a valid grounding argument under each grounding
KEY = {"som": "selected_candidate_id", "coord": "coordinates"}
BOTH = pytest.mark.parametrize("grounding", ["som", "coord"])


def out(grounding="som", **kw):
    """A compliant click output, changed by ``kw`` (``target=...`` sets the grounding argument)."""
    base = {"think": "The cart link is at the top.", "action_type": "click", KEY[grounding]: TARGET[grounding],
            "content": None, "guide_text": "Click the 'Cart' link at the top of the page."}
    if "target" in kw:
        base[KEY[grounding]] = kw.pop("target")
    base.update(kw)
    return json.dumps(base)


def reason(text, grounding="som"):
    return check_step(text, MENU, grounding)[1]


# ---- (i) parse: first well-formed object, exactly five keys, non-empty think and guide, a verb ---

@BOTH
def test_compliant_step_passes(grounding):
    step, why = check_step(out(grounding), MENU, grounding)
    assert why is None and step.action_type == "click" and step.guide_text.startswith("Click the 'Cart'")
    assert (step.candidate_id, step.coords) == ((12, None) if grounding == "som" else (None, (312.0, 174.0)))


@BOTH
def test_first_wellformed_object_through_fences_and_preambles(grounding):
    fenced = "Sure! Looking at the screenshot, I will open the cart.\n```json\n" + out(grounding) + "\n```\nDone."
    assert reason(fenced, grounding) is None
    # "{action}" in a preamble is not JSON and is skipped; braces inside strings do not count
    braces = "I answer in the form {action}: " + out(grounding, think="use {x} and } braces")
    assert check_step(braces, MENU, grounding)[0].think == "use {x} and } braces"
    # a second object never overrides the first, valid or not
    second = out(grounding, guide_text="Open the menu.") + "\n" + out(grounding, action_type="fly")
    assert check_step(second, MENU, grounding)[0].guide_text == "Open the menu."
    assert reason('{"note": "plan"} ' + out(grounding), grounding).startswith("missing_keys")
    broken = out(grounding)[:-1] + ",}"          # a trailing comma is not JSON: the next object counts
    assert reason(broken + " corrected: " + out(grounding), grounding) is None


@BOTH
@pytest.mark.parametrize("text, category", [
    ("", "no_json"), ("I think I should click the cart.", "no_json"), (None, "no_json"),
    ('{"think": "x", "action_type": "click", ', "no_json"),            # a truncated generation
])
def test_no_object(grounding, text, category):
    assert check_step(text, MENU, grounding) == (None, reason(text, grounding)) and \
        reason(text, grounding).startswith(category)


@BOTH
def test_exactly_the_five_keys(grounding):
    d = json.loads(out(grounding))
    assert reason(json.dumps({k: v for k, v in d.items() if k != "think"}), grounding) == "missing_keys: think"
    assert reason(out(grounding, extra="x"), grounding) == "extra_keys: extra"
    other = "coordinates" if grounding == "som" else "selected_candidate_id"      # the other grounding's key
    d[other] = d.pop(KEY[grounding])
    assert reason(json.dumps(d), grounding).startswith(f"missing_keys: {KEY[grounding]}")


@BOTH
@pytest.mark.parametrize("think", ["", "   ", None, ["a"]])
def test_think_must_be_non_empty(grounding, think):
    assert check_step(out(grounding, think=think), MENU, grounding) == (
        None, "empty_think: think must be a non-empty string")


@BOTH
@pytest.mark.parametrize("guide", ["", "  ", None, 3])
def test_guide_must_be_non_empty(grounding, guide):
    step, why = check_step(out(grounding, guide_text=guide), MENU, grounding)
    assert step is None and why.startswith("empty_guide")


@BOTH
@pytest.mark.parametrize("verb", ["hover", "Click me", 3, None, "finish_task"])
def test_verb_must_be_one_of_the_seven(grounding, verb):
    assert reason(out(grounding, action_type=verb), grounding).startswith("bad_verb")


@BOTH
def test_the_verb_is_one_of_the_seven_exactly_and_typed_text_is_kept_as_given(grounding):
    """App. D: action_type is one of the verbs as the contract spells them; type carries the exact
    text to type (spaces included), while a select label is read without surrounding spaces."""
    step, why = check_step(out(grounding, action_type="click"), MENU, grounding)
    assert why is None and step.action_type == "click"
    for loose in (" Click ", "CLICK", "click ", ["click"]):
        assert reason(out(grounding, action_type=loose), grounding).startswith("bad_verb"), loose
    step, why = check_step(out(grounding, action_type="type", content=" red shoes "), MENU, grounding)
    assert why is None and step.content == " red shoes "
    step, why = check_step(out(grounding, action_type="select", content=" Size M "), MENU, grounding)
    assert why is None and step.content == "Size M"


# ---- (ii) valid action: grounding argument of the element verbs, type's text, select's label ---

@BOTH
@pytest.mark.parametrize("verb, content", [("click", None), ("type", "iphone 15"), ("select", "Size M")])
def test_element_verbs_need_a_grounding_argument(grounding, verb, content):
    assert reason(out(grounding, action_type=verb, content=content), grounding) is None
    for bad in (None, True, "twelve", [1], {"x": 1}):
        assert reason(out(grounding, action_type=verb, content=content, target=bad), grounding).startswith("bad_target")


def test_som_id_must_be_in_the_menu_as_int_or_string():
    assert check_step(out(target="17"), MENU)[0].candidate_id == 17
    assert check_step(out(target=" 3 "), MENU)[0].candidate_id == 3
    assert reason(out(target=99)) == "id_not_in_menu: 99" and reason(out(target="99")) == "id_not_in_menu: 99"
    assert reason(out(target=12), grounding="som") is None and check_step(out(), [], "som")[1] == "id_not_in_menu: 12"
    assert reason(out(target=[312, 174])).startswith("bad_target")       # a pixel pair is no SoM id


def test_coordinates_are_a_pair_of_numbers_and_ignore_the_menu():
    assert check_step(out("coord", target=[312.4, 174]), [], "coord")[0].coords == (312.4, 174.0)
    for bad in (12, "312, 174", [312], [312, 174, 1], ["312", "174"], [float("nan"), 1]):
        assert reason(out("coord", target=bad), "coord").startswith("bad_target"), bad
    # a pair outside the viewport is a grounding argument all the same; the executor refuses it
    assert reason(out("coord", target=[1500, 10]), "coord") is None


@BOTH
@pytest.mark.parametrize("verb", ["type", "select"])
@pytest.mark.parametrize("content", [None, "", "  ", 5])
def test_type_needs_text_and_select_a_label(grounding, verb, content):
    assert reason(out(grounding, action_type=verb, content=content), grounding).startswith("missing_content")


@BOTH
@pytest.mark.parametrize("content, expected", [(None, None), ("$42.10", "$42.10"), ("", "")])
def test_finish_carries_a_string_or_null(grounding, content, expected):
    step, why = check_step(out(grounding, action_type="finish", target=None, content=content), MENU, grounding)
    assert why is None and step.content == expected
    assert reason(out(grounding, action_type="finish", target=None, content=42), grounding).startswith("bad_content")


@BOTH
@pytest.mark.parametrize("verb, target, content", [
    ("scroll", None, "down"), ("scroll", 99, "sideways"), ("press_enter", None, None), ("press_enter", "x", 5),
    ("go_back", 999, None), ("go_back", None, "now")])
def test_other_verbs_are_not_judged_on_target_or_content(grounding, verb, target, content):
    """App. D judges only the element verbs' grounding and type/select/finish content."""
    step, why = check_step(out(grounding, action_type=verb, target=target, content=content), MENU, grounding)
    assert why is None and step.candidate_id is None and step.coords is None


# ---- (iii) no leakage ---------------------------------------------------------------------------

@BOTH
def test_a_leaky_guide_fails_ofcr_but_stays_a_valid_action(grounding):
    step, why = check_step(out(grounding, guide_text="Click element 12."), MENU, grounding)
    assert why == "guide_leak: mark_word" and step is not None and step.action_type == "click"
    step, why = check_step(out(grounding, guide_text="Click at (312, 174)."), MENU, grounding)
    assert why == "guide_leak: coord_pair" and step is not None


def test_parse_step_is_clauses_i_and_ii_only():
    assert parse_step(out(guide_text="Click [12]."), MENU)[1] is None
    assert parse_step(out(), MENU, "pixels") == (None, "bad_grounding: 'pixels'")


def test_raw_guide_reads_the_guide_of_an_invalid_step():
    assert raw_guide(out(target=99, guide_text=" Open the cart. ")) == "Open the cart."
    assert raw_guide(out(think="", guide_text="Open the cart.")) == "Open the cart."
    assert raw_guide("no json") is None and raw_guide(out(guide_text="")) is None


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
        "```json\n" + out(action_type="type", content="shoes", target=17) + "\n```",
        out(action_type="finish", target=None, content=None),      # compliant: finish with null
        out(guide_text="Click element 12."),                       # valid action, leaky guide
        out(target=40),                                            # id not in menu
        out(think=""),                                             # empty think
        "I will finish now.",                                      # no JSON
    ]
    reasons = [reason(t) for t in outputs]
    assert reasons[:3] == [None, None, None] and reasons[3] == "guide_leak: mark_word"
    assert [r.split(":")[0] for r in reasons[4:]] == ["id_not_in_menu", "empty_think", "no_json"]
    assert ofcr(reasons) == pytest.approx(3 / 7)
    assert ofcr([]) is None


def test_score_episodes_pools_ofcr_and_keeps_failing_guides_in_g():
    eps = [{"task_id": 7, "success": 1, "outputs": [(out(), MENU), (out(target=1, guide_text="Open the cart."), MENU)]},
           {"task_id": "8", "success": 0, "outputs": [(out(guide_text="Click [3]."), MENU)]},
           {"task_id": 9, "success": 1, "grounding": "coord", "outputs": [(out("coord"), [])]}]
    scores = score_episodes(eps, gold=None)
    assert [s.ofcr for s in scores] == [0.5, 0.0, 1.0]
    summ = summarize(scores)
    # pooled over steps: 2 compliant of 4, not the mean of per-task rates
    assert summ["OFCR"] == pytest.approx(2 / 4) and summ["SR"] == pytest.approx(2 / 3)
    assert summ["reasons"] == {"id_not_in_menu": 1, "guide_leak": 1}
    assert summ["n_with_gold"] == 0 and not {"G", "GGS", "GGS_corpus"} & summ.keys()   # SR and OFCR only
    # the guide of the step that failed OFCR (id not in the menu) still counts in G (App. D)
    gold = {"7": ["Click the 'Cart' link at the top of the page.", "Open the cart."]}
    assert score_episodes(eps[:1], gold)[0].G == pytest.approx(1.0)


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
    # corpus GGS (App. D) over all three tasks; task 3 has no gold: G = 0, GGS = 0.4
    assert summ["GGS_corpus"] == pytest.approx((0.8125 + 0 + 0.4) / 3)
    assert summ["denominators"]["SR"] == "all 3 tasks run"
    assert summ["denominators"]["BLEU-1, BLEU-2, ROUGE-1, ROUGE-L, G, GGS, tax"] == "the 2 tasks with gold guides"
    assert summ["denominators"]["GGS_corpus"].startswith("all 3 tasks run")


# ---- gold-guide JSONL ------------------------------------------------------------------------

def test_load_gold_guides(tmp_path):
    p = tmp_path / "gold.jsonl"
    p.write_text('{"task_id": 27, "steps": [{"guide": "Open Orders.", "action": "click"}, '
                 '{"guide": " Pick the first. "}]}\n'
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
