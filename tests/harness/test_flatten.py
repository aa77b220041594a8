"""harness.env.flatten_axtree: BrowserGym's flattened AXTree with the plain divs and spans that
have a click handler printed, and teacher.replay.normalize_axtree taking them out again."""

from browsergym.utils.obs import flatten_axtree_to_str

from graph.axtree import parse_axtree
from harness.env import flatten_axtree, plain_generics
from harness.solvers_kit import clickables, first_text
from teacher.replay import normalize_axtree, state_hash


def node(nid, role, name="", bid=None, children=(), props=()):
    n = {"nodeId": str(nid), "role": {"value": role}, "name": {"value": name}, "childIds": [str(c) for c in children],
         "properties": [{"name": k, "value": {"value": v}} for k, v in props]}
    return {**n, "browsergym_id": bid} if bid else n


# an inbox line (a plain div over the sender and a nested clickable span), a live region, a plain div
AXTREE = {"nodes": [
    node(1, "RootWebArea", "Inbox", children=[2, 8, 10], props=[("focused", True)]),
    node(2, "generic", bid="18", children=[3, 4, 6]),
    node(3, "StaticText", "Hazel"),
    node(4, "generic", bid="20", children=[5]),
    node(5, "StaticText", "Reply"),
    node(6, "image", bid="26", children=[7]),
    node(7, "generic", bid="27"),
    node(8, "generic", bid="30", children=[9], props=[("live", "polite")]),
    node(9, "StaticText", "Saved"),
    node(10, "generic", bid="31", children=[11], props=[("focusable", True), ("focused", False)]),
    node(11, "StaticText", "Footer"),
]}


def test_clickable_plain_generics_are_printed_and_nothing_else_moves():
    plain = flatten_axtree_to_str(AXTREE)
    assert flatten_axtree(AXTREE) == flatten_axtree(AXTREE, {"99"}) == plain
    assert [n["browsergym_id"] for n in plain_generics(AXTREE)] == ["18", "20", "27", "31"]
    text = flatten_axtree(AXTREE, {"18", "20", "26", "30"})
    assert text.splitlines() == [
        "RootWebArea 'Inbox', focused",
        "\t[18] generic, clickable=True",
        "\t\tStaticText 'Hazel'",
        "\t\t[20] generic, clickable=True",
        "\t\t\tStaticText 'Reply'",
        "\t\t[26] image ''",             # a clickable node BrowserGym prints anyway: as it prints it
        "\t[30] generic, live='polite'",
        "\t\tStaticText 'Saved'",
        "\tStaticText 'Footer'",          # not clickable: skipped as before
    ]
    tree = parse_axtree(text)
    assert [(n.bid, first_text(tree, n)) for n in clickables(tree)] == [("18", "Hazel"), ("20", "Reply")]
    assert AXTREE["nodes"][1].get("properties") == []       # the page's tree is not changed


def test_normalization_takes_the_printed_generics_out_so_old_recordings_match():
    old, new = flatten_axtree_to_str(AXTREE), flatten_axtree(AXTREE, {"18", "20"})
    assert new != old and normalize_axtree(new) == normalize_axtree(old) and state_hash(new) == state_hash(old)
    assert normalize_axtree(old) == old                    # nothing else changes
    # the same page with other text is still another state
    assert state_hash(new.replace("'Reply'", "'Forward'")) != state_hash(old)
    assert state_hash(new.replace("[20] generic, clickable=True", "[20] generic, live='polite'")) != state_hash(old)
