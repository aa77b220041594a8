"""The AXTree parser on real observations, on hand-written lines, and against BrowserGym's own
flattener on a page rendered in Chromium."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from graph.axtree import AXTreeParseError, parse_axtree

PAGES = Path(__file__).parent / "pages"
CHROMIUM = Path("/usr/lib/chromium/chromium")


def test_every_shared_observation_parses(agentlab_run, shared_data, tmp_path):
    from data.ingest import ingest

    ingest("webprm", [shared_data / "webprm_collection_samples"], tmp_path)
    rows = (pq.read_table(agentlab_run / "trajectories.parquet").to_pylist()
            + pq.read_table(tmp_path / "trajectories.parquet").to_pylist())
    assert len(rows) == 873
    targets = missing = 0
    for r in rows:
        tree = parse_axtree(r["observation"], r["obs_format"])
        assert tree.unparsed == [], (r["source_path"], tree.unparsed[:3])
        assert tree.duplicate_bids() == []
        if r["obs_format"] == "indented":
            # every non-root node hangs under a node one tab shallower
            for n in tree.nodes[1:]:
                if n.depth:
                    assert tree.nodes[n.parent].depth == n.depth - 1
        # A demonstrated target is nearly always an element of its own observation; the real
        # exceptions are failed actions (hallucinated bids) and two clicks on elements that
        # exist in the HTML but were pruned from the AXTree. graph.build counts them.
        if r["action"] and r["action"].startswith(("click('", "fill('", "select_option('")):
            targets += 1
            bid = r["action"].split("'")[1]
            if bid not in tree.by_bid():
                missing += 1
                assert r["action_error"] or f'bid="{bid}"' in (r["html"] or ""), r["source_path"]
    assert targets > 400 and missing / targets < 0.05


@pytest.mark.parametrize("line,expect", [
    ("[a237] combobox 'Quantity' value='1', hasPopup='menu', expanded=False",
     dict(bid="a237", role="combobox", name="Quantity", value="1", props={"hasPopup": "menu", "expanded": False})),
    ("[46] generic, live='assertive', atomic",
     dict(bid="46", role="generic", name="", props={"live": "assertive", "atomic": True})),
    ("""[a142] cell "Lenovo's lightest, ThinkPad\"""",
     dict(bid="a142", role="cell", name="Lenovo's lightest, ThinkPad", props={})),
    ("StaticText '\\uf132'", dict(bid=None, role="StaticText", name="\uf132")),
    ("[a] Iframe 'Main Content'", dict(bid="a", role="Iframe", name="Main Content")),
    ("[1390] combobox 'Select type' hasPopup: menu expanded: False",
     dict(bid="1390", role="combobox", name="Select type", props={"hasPopup": "menu", "expanded": False})),
    ("[925] link 'Review' url: https://x.com/r/1900-6/", dict(bid="925", name="Review", props={"url": "https://x.com/r/1900-6/"})),
    ("[3404] LineBreak '\\n'", dict(bid="3404", role="LineBreak", name="\n")),
])
def test_parse_line(line, expect):
    (node,) = parse_axtree(line).nodes
    fields = {"bid": node.bid, "role": node.role, "name": node.name, "value": node.value, "props": node.props}
    for k, v in expect.items():
        assert fields[k] == v


def test_tree_structure_and_headers():
    text = ("Tab 0: Other\nTab 1 (current): Shop\n\n"
            "RootWebArea 'Shop'\n\t[1] navigation 'Main'\n\t\t[2] link 'Home'\n\t[3] main ''\n\t\t\t[4] button 'Deep'")
    tree = parse_axtree(text)
    assert tree.obs_format == "indented"
    assert [t["current"] for t in tree.tabs] == [False, True]
    by = tree.by_bid()
    assert tree.nodes[by["2"].parent].bid == "1"
    assert [a.role for a in tree.ancestors(by["2"])] == ["navigation", "RootWebArea"]
    assert tree.nodes[by["4"].parent].bid == "3"   # a depth jump attaches to the nearest shallower node
    with pytest.raises(AXTreeParseError):
        parse_axtree("\n\n")
    assert parse_axtree("[1] button 'A'\n[1] link 'B'").duplicate_bids() == ["1"]
    assert parse_axtree("[1] button 'A'\n%%% noise").unparsed == ["%%% noise"]


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed (make setup installs it)")
def test_matches_browsergym_flattener_in_chromium():
    from browsergym.core.observation import _post_extract, _pre_extract, extract_merged_axtree
    from browsergym.utils.obs import flatten_axtree_to_str
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM),
                                     args=["--disable-gpu", "--disable-quic", "--disable-sync"])
        try:
            page = browser.new_page()
            page.goto((PAGES / "form.html").as_uri())
            page.wait_for_load_state("load")
            _pre_extract(page)
            axtree = extract_merged_axtree(page)
            _post_extract(page)
        finally:
            browser.close()
    text = flatten_axtree_to_str(axtree)
    tree = parse_axtree(text, "indented")
    assert tree.unparsed == []
    printed = [l for l in text.split("\n") if l.strip()]
    assert len(tree.nodes) == len(printed)
    # Every node BrowserGym printed with a bid comes back with the same role and name.
    expected = {}
    for n in axtree["nodes"]:
        bid = n.get("browsergym_id")
        if bid and "name" in n and f"[{bid}] " in text:
            expected[bid] = (n["role"]["value"], n["name"]["value"].strip())
    got = {b: (n.role, n.name) for b, n in tree.by_bid().items()}
    assert expected and got == expected
    names = {n.name for n in tree.nodes}
    assert {"Item, with comma", "It's \"quoted\"", "Inside frame", "Adobe Acrobat"} <= names
    qty = next(n for n in tree.nodes if n.role == "combobox")
    assert qty.name == "Quantity" and qty.value == "2"
    frame_button = next(n for n in tree.nodes if n.name == "Inside frame")
    assert any(a.role == "Iframe" for a in tree.ancestors(frame_button))
