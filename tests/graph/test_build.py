"""graph.build on the real AgentLab traces, and on bad input."""

import dataclasses
import json
import shutil
from collections import Counter

import pyarrow.parquet as pq
import pytest

from data.actions import parse_action
from data.rundir import atomic_write_parquet
from data.schema import StepRecord, steps_to_table
from graph import demonstrated, elements_on_page, hop_distance, load_graph, temporal_successors
from graph.build import BuildConfig, build_graphs
from graph.load import graph_attrs
from graph.schema import EDGE_SCHEMA, NODE_SCHEMA


@pytest.fixture(scope="module")
def built(agentlab_run):
    stats = build_graphs(agentlab_run, workers=2)
    return agentlab_run, stats


def _nodes(run, site="servicenow"):
    return pq.read_table(run / "graphs" / site / "nodes.parquet").to_pylist()


def _edges(run, site="servicenow"):
    return pq.read_table(run / "graphs" / site / "edges.parquet").to_pylist()


def test_manifest_and_stats(built):
    run, stats = built
    manifest = json.loads((run / "graphs" / "manifest.json").read_text())
    s = manifest["sites"]["servicenow"]
    assert set(manifest["sites"]) == {"servicenow"}          # successful runs stay on ServiceNow
    assert manifest["identity"] == "paper" and stats.extra["config"]["identity"] == "paper"
    assert s["trajectories"] == 34 and s["observations"] == 314
    assert s["element_nodes"] > 500 and s["virtual_nodes"] > 0
    assert s["containment_edges"] > 0 and s["interaction_edges"] > 0
    assert s["url_paths"] >= 5
    assert s["ambiguity_rate"] < 0.01
    st = json.loads((run / "stats.json").read_text())["graph.build"]
    assert st["in"] == 870 and st["in"] == st["out"] + sum(st["rejected"].values())
    assert st["rejected"]["unsuccessful_trajectory"] == 556
    steps = st["steps"]
    assert steps["in"] == steps["out"] + sum(steps["rejected"].values())
    assert steps["rejected"]["action_failed"] > 0   # real timeouts, not demonstrations
    reasons = Counter(json.loads(l)["reason"] for l in (run / "rejects.jsonl").read_text().splitlines()
                      if json.loads(l)["stage"] == "graph.build")
    assert reasons["unsuccessful_trajectory"] == 556
    assert reasons["action_failed"] == steps["rejected"]["action_failed"]


def test_schemas_pinned(built):
    run, _ = built
    assert pq.read_schema(run / "graphs/servicenow/nodes.parquet").equals(NODE_SCHEMA)
    assert pq.read_schema(run / "graphs/servicenow/edges.parquet").equals(EDGE_SCHEMA)


def _ipad_links(run):
    return [n for n in _nodes(run) if n["name"] == "iPad pro" and n["role"] == "link"
            and n["url"].endswith("catalog_home.do") and "click" in n["ops"]]


def test_same_element_across_runs_is_one_node(built, tmp_path):
    run, _ = built
    # The catalog's "iPad pro" link in the "Top Requests" widget: clicked in every
    # order-ipad-pro run, under different bids, on a widget whose other items vary. App. B's
    # identity (the default) keeps the names of the widget's containers and counts the link
    # among all links: the runs split it in two nodes. Ours leaves content names out and
    # counts same-named links only: one node.
    paper = _ipad_links(run)
    assert len(paper) == 2 and sum(n["n_traj"] for n in paper) >= 5
    ours = tmp_path / "ours"
    ours.mkdir()
    shutil.copy(run / "trajectories.parquet", ours / "trajectories.parquet")
    build_graphs(ours, config=BuildConfig(identity="ours", workers=2))
    assert json.loads((ours / "graphs" / "manifest.json").read_text())["identity"] == "ours"
    links = _ipad_links(ours)
    assert len(links) == 1
    link = links[0]
    assert link["n_traj"] >= 5
    rows = pq.read_table(run / "trajectories.parquet").to_pylist()
    ipad_runs = {r["traj_id"] for r in rows if "order-ipad-pro" in r["task_id"] and r["success"]}
    clicks = {r["traj_id"] for r in rows if r["traj_id"] in ipad_runs and r["action"]
              and r["action"].startswith("click(") and "iPad pro" in r["observation"]
              and f"[{parse_action(r['action']).bid}] link 'iPad pro'" in r["observation"]}
    assert len(clicks) >= 3   # the demonstrations that clicked it, in different runs


def test_different_bids_do_not_split(built):
    run, _ = built
    multi = [n for n in _nodes(run) if n["kind"] == "element" and len(n["bids"]) > 1]
    assert multi, "some elements carry different bids in different observations"
    assert all(len(set(n["bids"])) == len(n["bids"]) for n in multi)


def test_virtual_nodes(built):
    run, _ = built
    virtual = [n for n in _nodes(run) if n["kind"] == "virtual"]
    by_op = Counter(n["name"] for n in virtual)
    assert by_op["scroll"] > 0 and by_op["send_msg_to_user"] > 0
    assert {n["vtype"] for n in virtual if n["name"] == "scroll"} == {"viewport"}
    assert {n["vtype"] for n in virtual if n["name"] == "send_msg_to_user"} == {"user"}
    answers = [v for n in virtual if n["name"] == "send_msg_to_user" for v in n["values"]]
    assert any("REQ00" in a for a in answers)


def test_edges_are_deduplicated_and_counted(built):
    run, _ = built
    edges = _edges(run)
    keys = [(e["src"], e["dst"], e["type"], e["op"]) for e in edges]
    assert len(keys) == len(set(keys))
    node_ids = {n["node_id"] for n in _nodes(run)}
    assert all(e["src"] in node_ids and e["dst"] in node_ids for e in edges)
    inter = [e for e in edges if e["type"] == "interaction"]
    assert sum(e["count"] for e in inter) > len(inter)    # some transitions recur across runs
    assert all(e["count"] >= len(e["trajectories"]) >= 1 for e in edges)
    # Transition count bound: a trajectory with k mapped steps gives at most k-1 transitions.
    st = json.loads((run / "stats.json").read_text())["graph.build"]
    assert sum(e["count"] for e in inter) <= st["steps"]["out"] - 34
    contain = [e for e in edges if e["type"] == "containment"]
    assert all(e["depth_gap"] >= 1 and e["op"] is None for e in contain)
    assert all(e["op"] and e["depth_gap"] is None for e in inter)


def test_round_trip_networkx(built):
    run, _ = built
    G = load_graph(run, "servicenow")
    nodes, edges = _nodes(run), _edges(run)
    assert G.number_of_nodes() == len(nodes) and G.number_of_edges() == len(edges)
    for n in nodes[:50]:
        assert G.nodes[n["node_id"]] == graph_attrs(n)
    e = edges[0]
    key = "containment" if e["type"] == "containment" else f"interaction:{e['op']}"
    assert G.edges[e["src"], e["dst"], key] == graph_attrs(e)
    link = next(n["node_id"] for n in nodes if n["name"] == "iPad pro" and "click" in n["ops"])
    assert demonstrated(G, link)["ops"] == ["click"]
    assert temporal_successors(G, link)
    assert link in elements_on_page(G, G.nodes[link]["url"])
    nxt = temporal_successors(G, link)[0][0]
    assert hop_distance(G, link, nxt) == 1.0
    with pytest.raises(FileNotFoundError, match="sites"):
        load_graph(run, "nowhere.example")


def _step(traj, i, obs, action, url="https://shop.example.com/a", error=None, success=True):
    return StepRecord(source="agentlab", site="shop.example.com", task_id="t", traj_id=traj, step_idx=i,
                      intent="buy", url=url, observation=obs, obs_format="indented", html=None,
                      action=action, action_error=error, thought=None, success=success,
                      source_path=f"{traj}/step_{i}", meta="{}")


OBS = "RootWebArea 'Shop'\n\t[1] link 'Home'\n\t[2] button 'Buy'\n\t\t[3] link 'Inside'"


def test_bad_input_is_counted_not_fatal(tmp_path):
    steps = [
        _step("a", 0, OBS, "click('2')"),
        _step("a", 1, "%%% not an axtree %%%", "click('2')"),
        _step("a", 2, OBS, "click('99')"),                                    # target missing
        _step("a", 3, OBS + "\n\t[2] link 'Dup'", "click('1')"),              # duplicate bids
        _step("a", 4, OBS, "click('1')", error="TimeoutError: Locator.click"),
        _step("a", 5, OBS, "scroll(0, 300)"),
        _step("a", 6, OBS, "send_msg_to_user('done')"),
        _step("a", 7, OBS, None),
        _step("b", 0, OBS, "click('1')", success=False),
        _step("c", 0, OBS, "click('2')"),
        _step("c", 1, OBS, "click('1')", error="TimeoutError: Locator.click"),
        _step("c", 2, OBS, "click('77')"),
        _step("c", 3, OBS, "scroll(0, 300)"),
    ]
    atomic_write_parquet(tmp_path / "trajectories.parquet", steps_to_table(steps))
    stats = build_graphs(tmp_path, workers=1)
    assert stats.n_in == 13 and stats.n_out == 10
    assert dict(stats.rejected) == {"unparseable_observation": 1, "duplicate_bids": 1, "unsuccessful_trajectory": 1}
    assert stats.extra["steps"] == {"in": 9, "out": 5, "rejected": {"target_not_in_observation": 2, "action_failed": 2}}
    edges = _edges(tmp_path, "shop.example.com")
    contain = [e for e in edges if e["type"] == "containment"]
    assert len(contain) == 1 and contain[0]["depth_gap"] == 1 and contain[0]["count"] == 10
    inter = {(e["op"], tuple(e["trajectories"])): e["count"] for e in edges if e["type"] == "interaction"}
    # a: an unreadable observation breaks the chain after click Buy; scroll -> answer remains.
    # c: a failed click and a missing target changed nothing, so click Buy -> scroll is direct.
    assert inter == {("scroll", ("a",)): 1, ("click", ("c",)): 1}
    nodes = {n["node_id"]: n for n in _nodes(tmp_path, "shop.example.com")}
    buy = next(n for n in nodes.values() if n["name"] == "Buy")
    assert buy["ops"] == ["click"] and buy["n_obs"] == 10


def test_include_failed_and_missing_input(tmp_path):
    steps = [_step("b", 0, OBS, "click('1')", success=False), _step("b", 1, OBS, None, success=False)]
    atomic_write_parquet(tmp_path / "trajectories.parquet", steps_to_table(steps))
    assert build_graphs(tmp_path, include_failed=True, workers=1).n_out == 2
    with pytest.raises(FileNotFoundError):
        build_graphs(tmp_path / "nothing")


def test_site_dirnames_are_safe_and_distinct():
    from data.rundir import site_dirname

    assert site_dirname("servicenow") == "servicenow" and site_dirname("apple.com") == "apple.com"
    assert not site_dirname("..").startswith(".") and "/" not in site_dirname("a/b")
    assert site_dirname("a b") != site_dirname("a_b")


def test_rebuild_removes_stale_site_folders(tmp_path):
    steps = [_step("a", 0, OBS, "click('2')"), _step("a", 1, OBS, None)]
    atomic_write_parquet(tmp_path / "trajectories.parquet", steps_to_table(steps))
    stale = tmp_path / "graphs" / "old.example"
    stale.mkdir(parents=True)
    (stale / "nodes.parquet").write_bytes(b"x")
    build_graphs(tmp_path, workers=1)
    assert not stale.exists() and (tmp_path / "graphs" / "shop.example.com" / "nodes.parquet").exists()


def test_mining_resolves_with_the_graphs_identity_and_guards(tmp_path):
    from data.rundir import RunDir
    from graph.passes import observe
    from proposals.mine import MineConfig, Miner

    # group: in App. B's chain only
    obs = "RootWebArea 'Shop'\n\tgroup 'Box'\n\t\t[1] link 'Home'\n\t\t[2] button 'Buy'"
    steps = [_step("a", 0, obs, "click('2')"), _step("a", 1, obs, None)]
    atomic_write_parquet(tmp_path / "trajectories.parquet", steps_to_table(steps))
    for identity, depth in (("ours", 0), ("paper", 7)):
        build_graphs(tmp_path, config=BuildConfig(identity=identity, workers=1, max_depth=depth))
        settings = Miner(RunDir(tmp_path), MineConfig()).resolve_settings
        assert settings == {"identity": identity, "max_depth": depth, "max_nodes": 100_000}
        seen = observe({**dataclasses.asdict(steps[0]), "html": None}, "shop.example.com", **settings)
        ids = set(seen.res.bid_to_node.values())
        assert ids == {n["node_id"] for n in _nodes(tmp_path, "shop.example.com") if n["kind"] == "element"}
    other = observe({**dataclasses.asdict(steps[0]), "html": None}, "shop.example.com", identity="ours").res.bid_to_node
    assert set(other.values()).isdisjoint(ids)      # the other identity's ids would match no node


WIDGETS = ("RootWebArea 'Order'\n\t[1] combobox 'Size'\n\t\t[2] option 'Small'\n\t\t[3] option 'Large'\n"
           "\t[4] radiogroup 'Colour'\n\t\t[5] radio 'Red'\n\t\t[6] radio 'Blue'\n"
           "\t[7] grid 'Items'\n\t\t[8] columnheader 'Name'\n\t\t\t[9] button 'Sort'\n\t\t[10] gridcell 'Pen'\n"
           "\t\t\t[11] link 'Pen'\n\t[12] tablist 'Views'\n\t\t[13] tab 'List'\n\t[14] button 'Buy'")


@pytest.mark.parametrize("mode", ["paper", "ours"])
def test_containment_paper_links_controls_only(tmp_path, mode):
    # §4.1 counts containment between controls ("options within comboboxes"): in 'paper' the
    # options hang from their combobox and nothing hangs from the radiogroup, grid, header,
    # cell or tab bar, which group controls; 'ours' links every element to them as well.
    atomic_write_parquet(tmp_path / "trajectories.parquet",
                         steps_to_table([_step("a", 0, WIDGETS, "click('14')"), _step("a", 1, WIDGETS, None)]))
    stats = build_graphs(tmp_path, config=BuildConfig(containment=mode, workers=1))
    names = {n["node_id"]: n["name"] for n in _nodes(tmp_path, "shop.example.com")}
    contain = {(names[e["src"]], names[e["dst"]]) for e in _edges(tmp_path, "shop.example.com")
               if e["type"] == "containment"}
    paper = {("Small", "Size"), ("Large", "Size")}
    grouped = {("Red", "Colour"), ("Blue", "Colour"), ("Name", "Items"), ("Sort", "Name"), ("Pen", "Items"),
               ("List", "Views")}
    assert contain == (paper if mode == "paper" else paper | grouped | {("Pen", "Pen")})
    manifest = json.loads((tmp_path / "graphs" / "manifest.json").read_text())
    assert manifest["containment"] == mode and stats.extra["config"]["containment"] == mode
    assert stats.extra["element_nodes"] == 14        # V is the same either way: only E_s changes


def test_containment_defaults_to_paper_and_refuses_others():
    assert BuildConfig().containment == "paper"
    with pytest.raises(ValueError, match="containment must be one of"):
        BuildConfig(containment="dense")


def test_chunks_never_split_a_trajectory():
    from graph.build import trajectory_chunks

    rows = [{"traj_id": t} for t in "aaabbcddde"]
    assert [[r["traj_id"] for r in c] for c in trajectory_chunks(rows, 2)] == [list("aaa"), list("bb"), list("cddd"),
                                                                              list("e")]
    # a trajectory whose rows are not together is never cut through
    rows = [{"traj_id": t} for t in "abab" + "cc"]
    assert [len(c) for c in trajectory_chunks(rows, 1)] == [4, 2]
    assert trajectory_chunks([], 64) == [[]]


def test_small_sites_share_a_fresh_process_and_a_large_one_has_its_own():
    from graph.build import process_tasks

    jobs = [("run", site, {"rows": n}) for site, n in zip("abcdef", [1500, 900, 200, 300, 600, 50])]
    tasks = process_tasks(jobs, 1000)
    assert [[j[1] for j in t] for t in tasks] == [["a"], ["b", "c"], ["d", "e", "f"]]
    assert process_tasks([], 1000) == []


def test_the_build_does_not_depend_on_its_chunks(built, tmp_path, monkeypatch):
    """A site's trees are seen a chunk of trajectories at a time; one observation per chunk, a memo
    emptied before every chunk and the distinct lines converted one at a time write the same graphs,
    parsed tables and stats as the whole site at once."""
    import graph.build as gb
    import graph.parsed as gp

    run, _ = built
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(run / "trajectories.parquet", one / "trajectories.parquet")
    monkeypatch.setattr(gb, "CHUNK", 1)
    monkeypatch.setattr(gb, "MEMO_ENTRIES", 0)
    monkeypatch.setattr(gp, "LINE_BATCH", 1)
    build_graphs(one, workers=1)
    for site_dir in sorted((run / "graphs").iterdir()):
        if site_dir.is_dir():
            for f in sorted(site_dir.iterdir()):
                assert (one / "graphs" / site_dir.name / f.name).read_bytes() == f.read_bytes(), f
    manifest = json.loads((run / "graphs" / "manifest.json").read_text())
    assert json.loads((one / "graphs" / "manifest.json").read_text())["totals"] == manifest["totals"]


def test_a_file_out_of_order_builds_the_same_graphs(built, tmp_path):
    """``data.ingest`` writes rows by (site, traj_id, step_idx) and a site's build streams them in
    that order; a file in another order (written by other means) is read whole and sorted, with
    the same outputs."""
    import pyarrow.parquet as pq

    from data.rundir import RunDir
    from graph.build import site_plan

    run, _ = built
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    table = pq.read_table(run / "trajectories.parquet")
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), shuffled / "trajectories.parquet", row_group_size=16)
    site = "servicenow"
    trajs = {t: 1 for t in set(table.column("traj_id").to_pylist())}
    assert site_plan(RunDir(run), site, trajs)[2] is True
    assert site_plan(RunDir(shuffled), site, trajs)[2] is False
    build_graphs(shuffled, workers=1)
    for site_dir in sorted((run / "graphs").iterdir()):
        if site_dir.is_dir():
            for f in sorted(site_dir.iterdir()):
                assert (shuffled / "graphs" / site_dir.name / f.name).read_bytes() == f.read_bytes(), f


def test_finding_a_sites_row_groups_leaves_no_metadata_behind(built):
    """``site_row_groups`` reads the file's metadata without ``metadata.schema``, whose reference
    cycle kept the whole metadata (7 MB at 10x the paper's pool) alive after the file closed,
    while a site's build turns the cycle collector off."""
    import gc

    import pyarrow.parquet as pq

    from graph.build import site_row_groups

    run, _ = built
    gc.collect()
    gc.disable()
    try:
        with pq.ParquetFile(run / "trajectories.parquet") as f:
            assert site_row_groups(f, "servicenow")
        del f
        assert not [o for o in gc.get_objects() if isinstance(o, pq.FileMetaData)]
    finally:
        gc.enable()
