"""A pair reads at a glance wherever it is shown: each target's role and name beside its bid (null
for a virtual target), icon glyphs as a marker with the element's other labels, and the rule's
one line on why a⁻ is worse; on a run through the real stages, in ``/api/pairs``, the list, the
pair page and the audit."""

from __future__ import annotations

import json
import re

import pytest
from starlette.testclient import TestClient

from dataset.readable import ICON, describe, mark_icons, readable, target, visible, why_worse
from dataset.viewer.app import make_app
from dataset.viewer.source import PairSource
from graph.axtree import parse_axtree
from viewer_run import make_mined_run

LOCAL = "http://127.0.0.1:8765"
TREE = parse_axtree("\n".join([
    "RootWebArea 'Shop', focused",
    "\t[10] navigation 'Main'",
    "\t\t[12] link '\\ue603', url='https://shop.example/cart'",
    "\t\t\tStaticText 'Cart (2)'",
    "\t\t[13] button '\\ue8b6 Search'",
    "\t\t[14] button '\\uf101'",
    "\t[20] textbox 'Name', value='Ada'",
]))


def test_targets_have_role_name_and_icons_as_markers():
    assert target(TREE, "click('13')") == {"bid": "13", "role": "button", "name": f"{ICON} Search", "labels": []}
    icon = target(TREE, "click('12')")
    assert icon["name"] == ICON and icon["labels"] == ["https://shop.example/cart", "Cart (2)"]
    assert describe(icon) == f"link '{ICON}' (https://shop.example/cart; Cart (2))"
    assert target(TREE, "click('14')")["labels"] == []                   # nothing else names it
    assert target(TREE, "fill('20', 'Bob')")["labels"] == []             # a name with text needs none
    for virtual in ("scroll(0, 200)", "go_back()", "send_msg_to_user('done')", "click('99')", "not an action"):
        assert target(TREE, virtual) is None
    assert describe(None).startswith("no element")
    assert readable("a\n\tb  \ue603\U000f0001c") == f"a b {ICON} c"
    assert mark_icons("[12] link '\\ue603\\ue604', clickable") == f"[12] link '{ICON}', clickable"
    assert readable("\\u00e9") == "\\u00e9"                              # an escape outside the private use area stays
    # a page's bidi override would show one name (or action) as another: controls are shown
    assert readable("Pay\u202e yrevileD") == "Pay[U+202E] yrevileD"
    assert visible("fill('5', 'a\u2066b\u200bc\x1b[2J')") == "fill('5', 'a[U+2066]b[U+200B]c[U+001B][2J')"


@pytest.mark.parametrize("rule,evidence,says", [
    ("structurally_near", {"hops": 2, "near_hops": 3, "shared_container": ["navigation", "Main"]},
     "a nearby element: 2 hops from a⁺'s target, inside navigation 'Main' (near: ≤ 3)"),
    ("textually_near_graph_distant", {"ratio": 0.82, "text_ratio": 0.75, "hops": None, "far_hops": 4,
                                      "distance": "graph"}, "text 82% like a⁺'s target, unreachable away"),
    ("repeat_past", {"k_back": 1, "from_step": 2, "demonstrated": "click('5')", "window": 3},
     "repeats step 2's click('5'), 1 step(s) back"),
    ("act_too_early", {"k_ahead": 2, "from_step": 6, "demonstrated": "click('7')", "window": 3},
     "takes step 6's click('7') now, 2 step(s) early"),
    ("away_from_goal", {"goal": "n", "pos_hops": 1, "neg_hops": 4, "distance": "graph"},
     "farther from the goal: 4 hops to the task's last element, a⁺'s target 1 hops"),
    ("create_a_cycle", {"returns_to": "/home", "via": "click", "current_page": "/x", "loop_steps": 2},
     "a loop: leads back to /home, left 2 step(s) ago"),
])
def test_each_rule_says_why_the_negative_is_worse(rule, evidence, says):
    line = why_worse(rule, json.dumps({**evidence, "also_fired": ["repeat_past"]}))
    assert says in line and line.endswith("(also: repeat_past)") and "\n" not in line
    assert why_worse(rule, "{}") == "" and why_worse(rule, None) == ""
    assert why_worse("unknown_rule", {"a": 1}) == "a=1"


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    root = tmp_path_factory.mktemp("readable")
    make_mined_run(root)
    return root


def test_api_list_pair_page_and_audit_name_the_targets(mined):
    source = PairSource.open(mined)
    client = TestClient(make_app(source, audit="ann", sample=3), base_url=LOCAL)
    rows = client.get("/api/pairs").json()
    assert rows and all({"pos_target", "neg_target", "why"} <= set(r) for r in rows)
    assert all(r["why"] for r in rows)                             # every mined pair has its rule's evidence
    named = [r for r in rows if r["neg_target"]]
    assert named and all(r["neg_target"]["role"] and r["neg_target"]["bid"] in r["action_neg"] for r in named)
    listing = client.get("/").text
    for r in rows:
        row = listing.split(f'data-pair="{r["pair_id"]}"')[1].split("</tr>")[0]
        for t in (r["pos_target"], r["neg_target"]):
            assert re.sub(r"&#3[49];", lambda m: {"&#34;": '"', "&#39;": "'"}[m.group()], describe(t)) in \
                row.replace("&#39;", "'").replace("&#34;", '"').replace("&amp;", "&")
        page = client.get(f"/pair/{r['pair_id']}").text.replace("&#39;", "'").replace("&amp;", "&")
        assert f'id="why">{r["why"]}' in page.replace("&#34;", '"')
        assert describe(r["neg_target"]) in page.replace("&#34;", '"')
    hostile = dict(rows[0], action_neg="fill('5', 'x\u202ey')")           # fill values come from pages too
    source.by_id[hostile["pair_id"]].update(action_neg=hostile["action_neg"])
    assert "x[U+202E]y" in client.get(f"/pair/{hostile['pair_id']}").text and "\u202e" not in client.get("/").text
    audit = client.get(client.get("/audit").url.path).text
    assert audit.count('class="tname"') == 2 and "why" not in audit.split("<main>")[1].split("Observation")[0]
