"""OpenWebRL A.2's element messages in the policy's feedback, as pure functions of the probes."""

from harness.env import Observation
from search.agent import describe_outcome

BUTTON = {"tag": "button", "role": "", "type": "", "name": "Buy now", "bid": "5"}
OVERLAY = {"tag": "div", "role": "dialog", "type": "", "name": "Accept cookies", "bid": ""}
FIELD = {"tag": "input", "role": "", "type": "search", "name": "City", "bid": "9"}


def obs(url="http://s/"):
    return Observation(goal="g", axtree="RootWebArea 'S'\n\t[5] button 'Buy now'\n\t[9] searchbox 'City'", url=url,
                       open_urls=[url])


def test_click_names_the_element_under_its_point():
    covered = describe_outcome("click('5')", obs(), obs(), {"target": BUTTON, "under": OVERLAY, "covered": True},
                               probed=True)
    assert covered.startswith("the click landed on <div> 'Accept cookies' (role dialog), which covers [5] "
                              "<button> 'Buy now' at its centre")
    plain = describe_outcome("click('5')", obs(), obs("http://s/cart"),
                             {"target": BUTTON, "under": BUTTON, "covered": False}, probed=True)
    assert plain == "clicked <button> 'Buy now'; navigated from http://s/ to http://s/cart"


def test_typing_names_the_focused_element():
    assert describe_outcome("fill('9', 'Lyon')", obs(), obs(), focused=FIELD, probed=True).startswith(
        "focused element: <input type=search> 'City'")
    assert "no element has focus" in describe_outcome("press('9', 'Enter')", obs(), obs(), probed=True)


def test_without_probes_the_feedback_is_as_before():
    assert describe_outcome("click('5')", obs(), obs("http://s/cart"), {"target": BUTTON, "covered": False}) == \
        "navigated from http://s/ to http://s/cart"
    assert "focused" not in describe_outcome("fill('9', 'x')", obs(), obs(), focused=FIELD)
