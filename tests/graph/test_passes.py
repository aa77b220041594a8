"""Each pass of graph.build on its own (graph/passes.py), on small hand-written observations."""

from data.sites import normalize_url_path
from graph.identity import NodeKind, VirtualType, virtual_node
from graph.passes import (
    containment_edges,
    demonstrated_steps,
    element_nodes,
    interaction_edges,
    next_urls,
    observe,
    parse_and_resolve,
    virtual_nodes,
)

SITE = "shop.example.com"
A, B = "https://shop.example.com/a", "https://shop.example.com/b"
PA, PB = normalize_url_path(A), normalize_url_path(B)
OBS = "RootWebArea 'Shop'\n\t[1] link 'Home'\n\t[2] button 'Buy'\n\t\t[3] link 'Inside'"
OBS_B = "RootWebArea 'Cart'\n\t[7] button 'Pay'"


def _row(traj, i, obs, action, url=A, error=None):
    return {"traj_id": traj, "step_idx": i, "site": SITE, "url": url, "observation": obs, "obs_format": "indented",
            "html": None, "action": action, "action_error": error, "source_path": f"{traj}/step_{i}"}


def _with_next(rows):
    for r, nxt in zip(rows, next_urls(rows)):
        r["next_url"] = nxt
    return rows


def test_parse_and_resolve_rejects_unreadable_and_repeated_bids():
    rows = _with_next([_row("a", 0, OBS, "click('2')"), _row("a", 1, "%%% not an axtree", "click('2')"),
                       _row("a", 2, OBS + "\n\t[2] link 'Dup'", "click('1')"), _row("a", 3, OBS, None)])
    obs = parse_and_resolve(SITE, rows)
    assert obs.n_in == 4 and [o.key for o in obs.accepted] == [("a", 0), ("a", 3)]
    assert obs.rejected == {("a", 1): "unparseable_observation", ("a", 2): "duplicate_bids"}
    assert [(r.reason, r.key) for r in obs.rejects] == [("unparseable_observation", {"traj_id": "a", "step_idx": 1}),
                                                        ("duplicate_bids", {"traj_id": "a", "step_idx": 2})]
    assert "bids repeated: ['2']" in obs.rejects[1].detail
    assert obs.accepted[0].next_url == A and obs.accepted[1].next_url is None


def test_demonstrated_steps_map_elements_and_typed_virtual_nodes():
    rows = _with_next([
        _row("a", 0, OBS, "click('2')"),
        _row("a", 1, OBS, "click('99')"),                                   # target missing
        _row("a", 2, OBS, "click('1')", error="TimeoutError"),              # failed: no demonstration
        _row("a", 3, OBS, "scroll(0, 300)"),                                # lands on the next page (B)
        _row("a", 4, OBS_B, "go_back()", url=B),                            # next observation rejected
        _row("a", 5, "%%%", "send_msg_to_user('done')", url=A),
    ])
    obs = parse_and_resolve(SITE, rows)
    steps = demonstrated_steps(SITE, obs)
    assert steps.n_in == 5 and dict(steps.rejected) == {"target_not_in_observation": 1, "action_failed": 1}
    by = {s.step_idx: s for s in steps.steps}
    assert sorted(by) == [0, 1, 3, 4]
    buy = obs.accepted[0].res.bid_to_node["2"]
    assert (by[0].node_id, by[0].kind) == (buy, NodeKind.ELEMENT)
    assert by[1].node_id is None and by[1].kind is None and (("a", 1) not in steps.mapped)
    scroll = by[3].virtual
    assert by[3].kind is NodeKind.VIRTUAL and scroll.vtype is VirtualType.VIEWPORT and scroll.page == PB
    assert scroll == virtual_node(SITE, "scroll", PA, PB)
    # The landing observation was rejected: its URL scopes the node.
    assert by[4].virtual.vtype is VirtualType.NAVIGATION and by[4].virtual.page == PA
    assert set(steps.mapped) == {("a", 0), ("a", 3), ("a", 4)}


def test_answers_are_scoped_to_the_current_page():
    v = virtual_node(SITE, "send_msg_to_user", PA, PB)
    assert v.vtype is VirtualType.USER and v.page == PA and v.kind is NodeKind.VIRTUAL
    k = virtual_node(SITE, "keyboard_press", PA, None)
    assert k.vtype is VirtualType.KEYBOARD and k.page == PA


def test_element_and_virtual_nodes():
    rows = _with_next([_row("a", 0, OBS, "click('2')"), _row("a", 1, OBS, "send_msg_to_user('done')"),
                       _row("b", 0, OBS, "click('2')"), _row("b", 1, OBS, None)])
    obs = parse_and_resolve(SITE, rows)
    steps = demonstrated_steps(SITE, obs)
    nodes, sightings = element_nodes(SITE, obs, steps)
    assert sightings["elements_seen"] == 12 and sightings["ambiguous_elements"] == 0
    assert len(nodes) == 3 and all(n["kind"] == NodeKind.ELEMENT and n["n_obs"] == 4 for n in nodes)
    buy = next(n for n in nodes if n["name"] == "Buy")
    assert buy["ops"] == ["click"] and buy["n_demos"] == 2 and buy["n_traj"] == 2 and buy["bids"] == ["2"]
    virtual = virtual_nodes(SITE, steps)
    assert len(virtual) == 1
    v = virtual[0]
    assert (v["kind"], v["vtype"], v["name"], v["values"], v["n_traj"]) == (
        NodeKind.VIRTUAL, VirtualType.USER, "send_msg_to_user", ["send_msg_to_user:done"], 1)


def test_containment_edges():
    obs = parse_and_resolve(SITE, _with_next([_row("a", 0, OBS, None), _row("b", 0, OBS, None)]))
    edges = containment_edges(obs)
    assert len(edges) == 1
    e = edges[0]
    res = obs.accepted[0].res
    assert (e["src"], e["dst"]) == (res.bid_to_node["3"], res.bid_to_node["2"])
    assert (e["type"], e["depth_gap"], e["count"], e["trajectories"]) == ("containment", 1, 2, ["a", "b"])


def test_interaction_edges_break_on_rejected_and_other_sites():
    rows = _with_next([_row("a", 0, OBS, "click('2')"), _row("a", 1, OBS, "click('1')"),
                       _row("a", 2, "%%%", "click('1')"), _row("a", 3, OBS, "click('3')"),
                       _row("a", 5, OBS, "click('2')"), _row("a", 6, OBS, None)])
    obs = parse_and_resolve(SITE, rows)
    steps = demonstrated_steps(SITE, obs)
    traj_steps = {"a": [(0, SITE), (1, SITE), (2, SITE), (3, SITE), (4, "other.example"), (5, SITE), (6, SITE)]}
    edges, cross = interaction_edges(SITE, steps, obs.rejected, traj_steps)
    ids = obs.accepted[0].res.bid_to_node
    # 0 -> 1 only: step 2 is unreadable (break), step 4 is another site's (break, counted).
    assert [(e["src"], e["dst"], e["op"]) for e in edges] == [(ids["2"], ids["1"], "click")]
    assert cross == 1


def test_observe_is_what_mining_uses():
    o = observe(_row("a", 0, OBS, "click('2')"), SITE, B)
    assert o.action.bid == "2" and o.next_url == B and o.res.unique_bid(o.res.bid_to_node["2"]) == "2"
