"""MAG's Set-of-Mark observation and executor on local pages in headless Chromium: the marks and
the menu match the page's interactive elements (hidden ones left out, long text clipped,
below-fold elements listed, at most 130 lines), ids are stable within a step, the screenshot is
1440x900 with a box on every visible mark, and each verb does what it says on the live page,
under Set-of-Mark and coordinate grounding (one observation for both)."""

import io
import json
from pathlib import Path

import pytest
from local_pages import LONG_LABEL, Pages, open_page_task

from harness.env import BrowserHarness
from search.mag.metrics import parse_step
from search.mag.som import _PALETTE, MAG_ACTION_SUBSETS, MAX_LINES, VIEWPORT, UnexecutableStep, observe, to_code

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


@pytest.fixture(scope="module")
def site():
    with Pages() as p:
        yield p


def harness(url):
    return BrowserHarness(open_page_task(url), viewport=VIEWPORT, action_subsets=MAG_ACTION_SUBSETS)


def by_text(obs, text, type_=None):
    hits = [m for m in obs.marks if m.text.startswith(text) and type_ in (None, m.type)]
    assert len(hits) == 1, (text, obs.menu)
    return hits[0]


def run(h, obs, output: dict, grounding="som"):
    target = {"som": {"selected_candidate_id": None}, "coord": {"coordinates": None}}[grounding]
    step, err = parse_step(json.dumps({"think": "Next.", "content": None, "guide_text": "Do it.", **target, **output}),
                           obs.menu_ids, grounding)
    assert err is None, err
    code, shown = to_code(step, obs, grounding)
    h.step(code)
    return observe(h), code, shown


def test_marks_and_menu_match_the_page(site):
    with harness(site.url + "/marks") as h:
        h.reset()
        obs = observe(h)
        again = observe(h)
        dom_count = h.env.page.evaluate(
            "document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea').length")
    lines = obs.menu.splitlines()
    assert lines == [
        "[1] LINK Home", "[2] LINK About us", "[3] INPUT Search", '[4] SELECT Color = "Red"',
        "[5] CHECKBOX Gift wrap", "[6] TEXTAREA Note to seller", "[7] BUTTON Search",
        f"[8] BUTTON {LONG_LABEL[:77].rstrip()}...", "[9] CLICKABLE Open menu",
        "[10] LINK Footer link below the fold (below)", "[11] BUTTON Bottom button (below)"]
    assert len(lines[7]) - len("[8] BUTTON ") == 80
    # the DOM's links, buttons and fields minus the two hidden buttons, plus the onclick div
    assert len(obs.marks) == dom_count - 2 + 1 == obs.n_interactive
    assert [(m.id, m.bid, m.box) for m in obs.marks] == [(m.id, m.bid, m.box) for m in again.marks]
    assert len({m.bid for m in obs.marks}) == len(obs.marks)
    assert obs.by_id[10].where == "below" and obs.by_id[10].box[1] > VIEWPORT["height"]

    from PIL import Image

    img = Image.open(io.BytesIO(obs.screenshot_png)).convert("RGB")
    assert img.size == (1440, 900)
    for m in obs.marks:
        if m.where == "in":        # the box outline at the middle of its left edge has the mark's colour
            x, y, w, hgt = m.box
            assert img.getpixel((int(x) + 1 if x >= 0 else 0, int(y + hgt / 2))) == _PALETTE[m.id % len(_PALETTE)]


def test_menu_is_capped_at_130_lines_viewport_first(site):
    with harness(site.url + "/many") as h:
        h.reset()
        obs = observe(h)
    assert obs.n_interactive == 200 and len(obs.marks) == MAX_LINES == len(obs.menu.splitlines())
    assert [m.id for m in obs.marks] == list(range(1, 131))
    assert [m.text for m in obs.marks] == [f"Link number {i}" for i in range(130)]   # nearest first
    assert any(m.where == "below" for m in obs.marks) and obs.marks[0].where == "in"


def test_each_verb_on_the_live_page(site):
    with harness(site.url + "/marks") as h:
        h.reset()
        obs = observe(h)
        obs, code, _ = run(h, obs, {"action_type": "select", "selected_candidate_id": by_text(obs, "Color").id,
                                    "content": "Blue"})
        assert by_text(obs, "Color").text == 'Color = "Blue"'
        search = by_text(obs, "Search", "INPUT")
        obs, code, shown = run(h, obs, {"action_type": "type", "selected_candidate_id": str(search.id),
                                        "content": "kettle"})
        assert code.startswith("fill(")
        assert shown == f'action_type: type; target: [{search.id}] INPUT Search; content: "kettle"'
        assert by_text(obs, "Search =").text == 'Search = "kettle"'
        obs, code, _ = run(h, obs, {"action_type": "scroll", "content": "down"})
        # a wheel scroll settles asynchronously (the page ends in a tail, so 700 px can always be scrolled
        # whatever the fonts make of its height)
        assert code == "scroll(0, 700)"
        h.env.page.wait_for_function("window.scrollY === 700", timeout=10_000)
        obs = observe(h)
        assert by_text(obs, "Footer link").where == "in" and by_text(obs, "Home").where == "above"
        obs, code, _ = run(h, obs, {"action_type": "scroll", "content": "up"})
        h.env.page.wait_for_function("window.scrollY === 0", timeout=10_000)
        obs, code, _ = run(h, obs, {"action_type": "press_enter"})        # submits the field typed into
        assert code == "keyboard_press('Enter')"
        assert obs.url.endswith("/echo?q=kettle&color=Blue&note=&secret=x") and not obs.last_action_error
        obs, code, _ = run(h, obs, {"action_type": "go_back"})
        assert code == "go_back()" and obs.url.endswith("/marks")
        obs, code, _ = run(h, obs, {"action_type": "click", "selected_candidate_id": by_text(obs, "About us").id})
        assert obs.url.endswith("/echo?from=about")
        obs, code, _ = run(h, obs, {"action_type": "finish", "content": "The answer is 42"})
        assert code == "send_msg_to_user('The answer is 42')"
        last = h.env.chat.messages[-1]
        assert last == {**last, "role": "assistant", "message": "The answer is 42"}


def test_coordinate_grounding_on_the_live_page(site):
    with harness(site.url + "/marks") as h:
        h.reset()
        obs = observe(h)
        assert obs.menu.splitlines()[0] == "[1] LINK Home"            # the same menu as under SoM
        box = by_text(obs, "Search", "INPUT")
        obs, code, shown = run(h, obs, {"action_type": "type", "coordinates": list(box.center), "content": "mug"},
                               "coord")
        assert code.startswith("mouse_click(") and by_text(obs, "Search =").text == 'Search = "mug"'
        assert shown == f'action_type: type; target: [{box.id}] INPUT Search; content: "mug"'   # the mark it hits
        sel = by_text(obs, "Color")
        obs, code, shown = run(h, obs, {"action_type": "select", "coordinates": list(sel.center), "content": "Green"},
                               "coord")
        assert code == f"select_option('{sel.bid}', 'Green')" and by_text(obs, "Color").text == 'Color = "Green"'
        step, _ = parse_step(json.dumps({"think": "x", "action_type": "select", "coordinates": [1400, 880],
                                         "content": "Red", "guide_text": "x"}), (), "coord")
        with pytest.raises(UnexecutableStep):
            to_code(step, obs, "coord")
        obs, code, _ = run(h, obs, {"action_type": "click", "coordinates": list(by_text(obs, "Open menu").center)},
                           "coord")
        assert h.env.page.title() == "clicked"
        obs, code, _ = run(h, obs, {"action_type": "click", "coordinates": list(by_text(obs, "Search =").center)},
                           "coord")
        obs, code, _ = run(h, obs, {"action_type": "press_enter"}, "coord")
        assert "/echo?q=mug&color=Green" in obs.url


def test_iframe_offsets_offscreen_x_and_a_late_navigation(site):
    with harness(site.url + "/frame") as h:
        h.reset()
        obs = observe(h)
        inner, far, half = by_text(obs, "Inner link"), by_text(obs, "Far right link"), by_text(obs, "Half visible")
        assert far.where == "right" and far.center[0] > 1440 and "Far right link (right)" in obs.menu
        assert half.where == "in" and half.center == (1420, 310)      # the visible part (1400..1439) centre
        # content of the iframe starts at 30 (margin) + 10 (border) + 5 (padding), 100 + 10 + 5
        assert inner.box[:2] == (45 + 20, 115 + 20)
        obs, code, _ = run(h, obs, {"action_type": "click", "coordinates": list(inner.center)}, "coord")
        assert any(f.url.endswith("/echo?from=inner") for f in h.env.page.frames)

        h.env.page.goto(site.url + "/many")          # the page moved after BrowserGym's observation
        obs = observe(h)
        assert obs.settle_retries == 1 and obs.url.endswith("/many") and len(obs.marks) == MAX_LINES
        assert "Link number 0" in h.last_axtree
