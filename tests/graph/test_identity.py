"""Persistent identity on hand-made pages: bids never matter, context does."""

from graph.axtree import parse_axtree
from graph.resolve import resolve_observation

PAGE = """RootWebArea 'Shop (3)', focused
\t[{nav}] navigation 'Main'
\t\t[{home}] link 'Home'
\t[{main}] main ''
\t\t[{t}] table ''
\t\t\t[{r1}] row ''
\t\t\t\t[{c1}] cell '{cell1}'
\t\t\t\t\t[{b1}] button 'Delete'
\t\t\t[{r2}] row ''
\t\t\t\t[{c2}] cell 'Banana 2'
\t\t\t\t\t[{b2}] button 'Delete'
\t\t[{q}] textbox 'Search'
{typed}"""


def _page(offset=0, cell1="Apple 1", typed="", title=None):
    names = ["nav", "home", "main", "t", "r1", "c1", "b1", "r2", "c2", "b2", "q"]
    ids = {k: str(i + offset) for i, k in enumerate(names)}
    text = PAGE.format(cell1=cell1, typed=typed, **ids)
    if title:
        text = text.replace("'Shop (3)'", repr(title))
    return text, ids


def _resolve(text, url="https://shop.example.com/cart?id=7", identity="paper"):
    return resolve_observation(text, "indented", "shop", url, identity=identity)


def test_bids_never_enter_identity():
    (a, ida), (b, idb) = _page(0), _page(500, title="Shop (4)")
    ra, rb = _resolve(a), _resolve(b, url="https://www.shop.example.com/cart/?id=9")
    assert set(ra.bid_to_node) == {ida[k] for k in ("home", "b1", "b2", "q")}   # the interactive ones
    for key in ("home", "b1", "b2", "q"):
        assert ra.bid_to_node[ida[key]] == rb.bid_to_node[idb[key]], key


def test_distinct_elements_get_distinct_ids():
    text, ids = _page()
    r = _resolve(text)
    assert len(set(r.bid_to_node.values())) == len(r.bid_to_node)
    assert r.bid_to_node[ids["b1"]] != r.bid_to_node[ids["b2"]]   # same role+name, other row
    assert not r.ambiguous and r.unique_bid(r.bid_to_node[ids["b1"]]) == ids["b1"]


def test_content_and_typed_text_do_not_split_elements():
    base, ids = _page()
    changed, _ = _page(cell1="Apple 1 (sale!)", typed="\t\t\t\tStaticText 'shoes'".replace("\t\t\t\t", "\t\t\t"))
    r1, r2 = _resolve(base, identity="ours"), _resolve(changed, identity="ours")
    assert r1.bid_to_node[ids["b1"]] == r2.bid_to_node[ids["b1"]]   # a cell's name is its content
    assert r1.bid_to_node[ids["q"]] == r2.bid_to_node[ids["q"]]     # text typed into the box
    # App. B keeps every ancestor's name: the cell's content is in the chain; typed text is not.
    p1, p2 = _resolve(base), _resolve(changed)
    assert p1.bid_to_node[ids["b1"]] != p2.bid_to_node[ids["b1"]]
    assert p1.bid_to_node[ids["b2"]] == p2.bid_to_node[ids["b2"]]
    assert p1.bid_to_node[ids["q"]] == p2.bid_to_node[ids["q"]]


APP_B = """RootWebArea 'Flights (2 alerts)'
\tmain ''
\t\tregion 'Flight search'
\t\t\tgeneric ''
\t\t\t\tgroup ''
\t\t\t\t\t[1] link 'Jan 27'
\t\t\t\t\tgeneric ''
\t\t\t\t\t\t[2] link 'Jan 28'
\t\t\t\t\t[3] combobox 'From'
"""


def test_paper_identity_is_app_b():
    r = resolve_observation(APP_B, "indented", "air", "https://air.example/", identity="paper")
    ctx = {bid: r.contexts[nid] for bid, nid in r.bid_to_node.items()}
    # App. B's example chain: root -> main -> region "Flight search" -> group; wrappers omitted,
    # the root's title left out, every other name kept.
    assert ctx["2"].ancestors == (("RootWebArea", ""), ("main", ""), ("region", "Flight search"), ("group", ""))
    assert ctx["1"].ancestors == ctx["2"].ancestors == ctx["3"].ancestors
    # the ordinal counts siblings of the same role (the wrapper around 'Jan 28' does not separate them)
    assert (ctx["1"].ordinal, ctx["2"].ordinal, ctx["3"].ordinal) == (0, 1, 0)
    o = resolve_observation(APP_B, "indented", "air", "https://air.example/", identity="ours")
    octx = {bid: o.contexts[nid] for bid, nid in o.bid_to_node.items()}
    assert octx["2"].ancestors == (("RootWebArea", ""), ("main", ""), ("region", "Flight search"))
    assert (octx["1"].ordinal, octx["2"].ordinal) == (0, 0)       # same role and name only
    # A link added before them shifts App. B's ordinals (a new node), not ours.
    added = APP_B.replace("\t\t\t\t\t[1] link 'Jan 27'", "\t\t\t\t\t[0] link 'Jan 26'\n\t\t\t\t\t[1] link 'Jan 27'")
    r2 = resolve_observation(added, "indented", "air", "https://air.example/", identity="paper")
    o2 = resolve_observation(added, "indented", "air", "https://air.example/", identity="ours")
    assert r2.bid_to_node["2"] != r.bid_to_node["2"] and o2.bid_to_node["2"] == o.bid_to_node["2"]
    # Titles never split either (both leave the document root's name out).
    retitled = APP_B.replace("Flights (2 alerts)", "Flights (3 alerts)")
    assert resolve_observation(retitled, "indented", "air", "https://air.example/").bid_to_node == r.bid_to_node


def test_page_scopes_identity():
    text, ids = _page()
    assert (_resolve(text).bid_to_node[ids["home"]]
            != _resolve(text, url="https://shop.example.com/other").bid_to_node[ids["home"]])


def test_true_duplicates_are_reported_ambiguous():
    text = "RootWebArea 'x'\n\t[1] button 'Go'\n\t[2] button 'Go'"
    r = resolve_observation(text, "indented", "s", "http://s/x")
    # siblings with the same role and name differ by ordinal: not ambiguous
    assert not r.ambiguous
    flat = "[1] button 'Go'\n[2] button 'Go'"
    rf = resolve_observation(flat, "flat", "s", "http://s/x")
    assert not rf.ambiguous and rf.page.context == "flat"


def test_flat_tree_takes_ancestors_from_html():
    flat = "[1] RootWebArea 'Shop'\n[5] navigation 'Top'\n[7] link 'Home'\n[9] navigation 'Bottom'\n[11] link 'Home'"
    html = ("<html bid='1'><body><nav bid='5' aria-label='Top'><div><a bid='7'>Home</a></div></nav>"
            "<nav bid='9' aria-label='Bottom'><a bid='11'>Home</a></nav></body></html>")
    r = resolve_observation(flat, "flat", "s", "http://s/", html=html)
    assert r.page.context == "html"
    assert r.bid_to_node["7"] != r.bid_to_node["11"]
    assert r.contexts[r.bid_to_node["7"]].ancestors[-1] == ("navigation", "Top")
    plain = resolve_observation(flat, "flat", "s", "http://s/")   # no HTML: landmarks as section anchors
    assert plain.page.context == "flat"
    assert plain.contexts[plain.bid_to_node["7"]].ancestors == (("navigation", "Top"),)
    assert plain.bid_to_node["7"] != plain.bid_to_node["11"]
    assert parse_axtree(flat).obs_format == "flat"
