"""The six rules on hand-checked steps of real WorkArena traces (the bundled sample, so that
they run without ../shared), and the audit of what they mine."""

import hashlib
import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

from conftest import BUNDLED
from data.ingest import ingest
from data.rundir import RunDir
from data.schema import CANDIDATE_SCHEMA, RULES
from graph.build import build_graphs
from proposals.audit import audit_table
from proposals.mine import MineConfig, mine

TRAJ = "2025-01-02_13-08-04_DemoAgentArgs_on_workarena.servicenow.order-standard-laptop_33"


@pytest.fixture(scope="module")
def scripted_llm(tmp_path_factory):
    """Fill values come from a scripted OpenAI-protocol server: these tests are about the rules,
    not the small model's wording (test_fill.py covers the prompt and its validation)."""
    from llm import LLMConfig
    from llm.serve import fixed_answer, serve_in_thread

    server = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "scripted")
    yield LLMConfig(base_url=server.base_url, model="scripted", cache_dir=str(tmp_path_factory.mktemp("llm")))
    server.shutdown()


@pytest.fixture(scope="module")
def bundled_run(tmp_path_factory):
    """The bundled sample (11 successful WorkArena runs) ingested, with its graphs."""
    run = tmp_path_factory.mktemp("bundled_run")
    ingest("canonical", [BUNDLED / "agentlab_workarena.parquet"], run)
    build_graphs(run, workers=1)
    return run


@pytest.fixture(scope="module")
def mined(bundled_run, scripted_llm):
    stats = mine(bundled_run, MineConfig(sample_size=200, seed=42), scripted_llm, workers=1)
    digest = hashlib.sha256((bundled_run / "candidates.parquet").read_bytes()).hexdigest()
    again = mine(bundled_run, MineConfig(sample_size=200, seed=42), scripted_llm, workers=1)
    digest2 = hashlib.sha256((bundled_run / "candidates.parquet").read_bytes()).hexdigest()
    rows = pq.read_table(bundled_run / "candidates.parquet").to_pylist()
    return stats, again, rows, digest, digest2


def _at(rows, step, rule):
    return [c for c in rows if c["traj_id"] == TRAJ and c["step_idx"] == step and c["rule"] == rule]


def test_all_six_rules_fire_and_nothing_is_hallucinated(mined, bundled_run):
    stats, _, rows, _, _ = mined
    audit = stats.extra["audit"]
    assert all(audit["by_rule"][r]["pairs"] > 0 for r in RULES)
    assert audit["pairs"] == len(rows)
    assert audit["hallucinated_targets"] == 0 and audit["other"] == 0 and audit["stored_gmcp_disagrees"] == 0
    # The stage record holds the audit of the file as written (the same bytes, re-derived).
    assert audit == audit_table(bundled_run, "candidates")
    assert stats.n_in == stats.n_out + sum(stats.rejected.values())
    assert pq.read_schema(bundled_run / "candidates.parquet").equals(CANDIDATE_SCHEMA)
    assert sum(c["sampled"] for c in rows) == 200 == audit["sample"]["pairs"]
    s = json.loads((bundled_run / "stats.json").read_text())["proposals.mine"]
    assert s["in"] == s["out"] + sum(s["rejected"].values())


def test_same_seed_same_bytes(mined):
    _, _, _, digest, digest2 = mined
    assert digest == digest2


def _observations(run):
    """(traj_id, step_idx) -> the parsed observation, read back from trajectories.parquet."""
    from graph.axtree import parse_axtree

    rows = pq.read_table(run / "trajectories.parquet", columns=["traj_id", "step_idx", "observation", "obs_format"])
    return {(r["traj_id"], r["step_idx"]): parse_axtree(r["observation"], r["obs_format"]) for r in rows.to_pylist()}


def test_stored_gmcp_matches_the_files(mined, bundled_run):
    """Each stored ``gmcp`` flag against the paper's definition, re-derived here from the files
    (not from the columns the miner wrote next to it): both actions re-parsed, both targets
    exactly once in O_t, the same op. Both values occur, so a miner writing a constant fails."""
    from data.actions import ELEMENT_OPS, parse_action

    stats, _, rows, _, _ = mined
    trees = _observations(bundled_run)
    kinds = {n["node_id"]: n["kind"] for n in pq.read_table(bundled_run / "graphs" / "servicenow" / "nodes.parquet",
                                                           columns=["node_id", "kind"]).to_pylist()}
    flags = Counter()
    for c in rows:
        pos, neg = parse_action(c["action_pos"]), parse_action(c["action_neg"])
        bids = Counter(n.bid for n in trees[(c["traj_id"], c["step_idx"])].nodes if n.bid is not None)
        grounded = all(a.op in ELEMENT_OPS and bids[a.bid] == 1 for a in (pos, neg))
        assert c["gmcp"] == (grounded and pos.op == neg.op), c
        flags[c["gmcp"]] += 1
        assert neg.op in ELEMENT_OPS and bids[neg.bid] == 1            # every negative is grounded
        assert c["action_neg"] != c["action_pos"]
        assert kinds[c["neg_node"]] == "element"              # never a virtual negative
    assert flags[True] > 0 and flags[False] > 0
    for s in (stats.extra["audit"], stats.extra["audit"]["sample"]):
        assert s["gmcp"] + s["virtual_positive"] + s["affordance_mismatch"] + s["other"] == s["pairs"]
        assert s["gmcp"] == sum(g["gmcp"] for g in s["by_rule"].values())
        assert s["gmcp"] == sum(g["gmcp"] for g in s["by_axis"].values())
    assert stats.extra["audit"]["gmcp"] == flags[True]


def test_structurally_near_on_the_software_checkboxes(mined):
    # Step 3 clicks the label of "Adobe Acrobat"; its neighbours in the same cell are the two
    # checkboxes. The "Order Now" button is in another region of the page: not structurally near.
    rows = mined[2]
    got = {c["action_neg"]: json.loads(c["evidence"]) for c in _at(rows, 3, "structurally_near")}
    assert set(got) == {"click('a210')", "click('a217')"}
    assert all(e["hops"] == 2 and e["shared_container"][0] == "cell" for e in got.values())
    assert "click('a305')" not in got


def test_temporal_rules_replay_demonstrated_actions(mined, bundled_run, scripted_llm, tmp_path):
    """act_too_early replays step 7's click at step 6. repeat_past at step 7 would replay step
    6's fill of the 'Additional software requirements' textarea, still on the page. Under the
    paper's identity (the default) the textarea is another node once typed into: its table
    cell's accessible name, part of the ancestor chain App. B keeps, now carries the typed text,
    so the replay is an absent target; under ``ours`` (chain names of content containers left
    out) it is the same node and the fill is replayed."""
    import shutil

    from graph.build import BuildConfig

    rows = mined[2]
    early = {c["action_neg"]: json.loads(c["evidence"]) for c in _at(rows, 6, "act_too_early")}
    assert early == {"click('a305')": {"demonstrated": "click('a305')", "from_step": 7, "k_ahead": 1, "window": 3}}
    fill = "fill('a230', 'Slack, Trello, Zoom, Asana, HubSpot')"
    assert fill not in {c["action_neg"] for c in _at(rows, 7, "repeat_past")}
    rejects = [json.loads(line) for line in (bundled_run / "rejects.jsonl").read_text().splitlines()]
    assert any(r["reason"] == "absent_target" and r["key"] == {"traj_id": TRAJ, "step_idx": 7, "rule": "repeat_past"}
               for r in rejects)
    run = tmp_path / "ours"
    run.mkdir()
    shutil.copy(bundled_run / "trajectories.parquet", run / "trajectories.parquet")
    build_graphs(run, config=BuildConfig(identity="ours", workers=1))
    mine(run, MineConfig(sample_size=200, seed=42), scripted_llm, workers=1)
    ours = [c for c in pq.read_table(run / "candidates.parquet").to_pylist()
            if c["traj_id"] == TRAJ and c["step_idx"] == 7 and c["rule"] == "repeat_past"]
    assert fill in {c["action_neg"] for c in ours} and all(c["value_source"] == "action" for c in ours)


def test_textually_near_but_graph_distant(mined):
    # Step 8 clicks "Continue Shopping" in the order-status header; another "Continue Shopping"
    # link of the page is unreachable from it in the graph. "Home", next to it, is not similar.
    rows = mined[2]
    got = _at(rows, 8, "textually_near_graph_distant")
    assert [c["action_neg"] for c in got] == ["click('a161')"]
    ev = json.loads(got[0]["evidence"])
    assert ev["ratio"] == 1.0 and ev["hops"] is None


def test_create_a_cycle_goes_back_to_a_visited_page(mined):
    rows = mined[2]
    got = _at(rows, 1, "create_a_cycle")
    assert [c["action_neg"] for c in got] == ["click('a78')"]
    ev = json.loads(got[0]["evidence"])
    assert ev["returns_to"].endswith("catalog_home.do") and ev["loop_steps"] == 1


def test_away_from_goal_is_strictly_and_finitely_farther(mined):
    rows = mined[2]
    assert _at(rows, 9, "away_from_goal")
    got = [c for c in rows if c["rule"] == "away_from_goal"]
    for c in got:
        ev = json.loads(c["evidence"])
        assert ev["neg_hops"] is not None and ev["neg_hops"] > ev["pos_hops"]


def test_no_select_option_is_clicked(mined, bundled_run):
    """Options of a native select are chosen through the select, never acted on by themselves:
    no negative targets an option of a combobox in O_t. The bundled pages have such selects
    within reach of the rules, and their select_option negatives are mined."""
    from proposals.affordance import select_of

    rows = mined[2]
    trees = _observations(bundled_run)
    on_select = 0
    for c in rows:
        tree = trees[(c["traj_id"], c["step_idx"])]
        node = tree.by_bid()[c["neg_bid"]]
        assert select_of(tree, node) is None, c["action_neg"]
        on_select += c["op_neg"] == "select_option" and node.role == "combobox"
    steps_with_options = sum(any(select_of(t, n) for n in t.nodes) for k, t in trees.items()
                             if k in {(c["traj_id"], c["step_idx"]) for c in rows})
    assert steps_with_options > 0 and on_select > 0


def test_no_graph_ablation(bundled_run, tmp_path, scripted_llm):
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(bundled_run / "trajectories.parquet", run / "trajectories.parquet")   # no graphs at all
    stats = mine(run, MineConfig(sample_size=50, seed=1, no_graph=True), scripted_llm)
    rows = pq.read_table(run / "candidates.parquet").to_pylist()
    assert rows and {c["mode"] for c in rows} == {"no_graph"}
    assert stats.extra["audit"]["hallucinated_targets"] == 0
    assert all(json.loads(c["evidence"]).get("distance", "page") == "page" for c in rows)
    with pytest.raises(FileNotFoundError, match="graph.build"):
        mine(run, MineConfig(sample_size=5))


def test_single_axis_variant(bundled_run, tmp_path, mined, scripted_llm):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(bundled_run, run)
    mine(run, MineConfig(sample_size=50, axes=("temporal",)), scripted_llm)
    rules = {c["rule"] for c in pq.read_table(run / "candidates.parquet").to_pylist()}
    assert rules == {"repeat_past", "act_too_early"}


def test_all_six_rules_fire_on_the_shared_traces(agentlab_run, scripted_llm):
    """All 53 shared AgentLab runs (skipped without ../shared): every rule fires, and the audit
    re-derives every pair as grounded."""
    build_graphs(agentlab_run, workers=2)
    stats = mine(agentlab_run, MineConfig(sample_size=300, seed=42), scripted_llm)
    audit = stats.extra["audit"]
    assert all(audit["by_rule"][r]["pairs"] > 0 for r in RULES)
    assert audit["hallucinated_targets"] == 0 and audit["other"] == 0


def test_grounding_comes_before_the_cap(mined, bundled_run, scripted_llm, tmp_path):
    """Without a cap (--max-per-rule 0) every grounded candidate is kept; with the default cap of
    3, counted after grounding, a rule still fires at every step where it has a grounded
    candidate, and keeps min(3, what it has) there. Per rule, in = out + rejected."""
    import shutil

    stats, _, rows, _, _ = mined
    assert stats.extra["config"]["max_per_rule"] == 3
    run = tmp_path / "run"
    shutil.copytree(bundled_run, run)
    uncapped = mine(run, MineConfig(sample_size=200, seed=42, max_per_rule=0), scripted_llm, workers=1)
    assert uncapped.extra["config"]["max_per_rule"] == 0
    everything = pq.read_table(run / "candidates.parquet").to_pylist()
    capped = Counter((c["traj_id"], c["step_idx"], c["rule"]) for c in rows)
    grounded = Counter((c["traj_id"], c["step_idx"], c["rule"]) for c in everything)
    assert len(everything) > len(rows) and max(grounded.values()) > 3 >= max(capped.values())
    # A later rule may find more with the cap (an earlier rule took fewer), never fewer than it can keep.
    assert all(capped[k] >= min(3, n) for k, n in grounded.items()), \
        [(k, capped[k], n) for k, n in grounded.items() if capped[k] < min(3, n)]
    for s in (stats, uncapped):
        for rule, r in s.extra["rules"].items():
            assert r["in"] == r["out"] + sum(r["rejected"].values()), rule
        assert sum(r["out"] for r in s.extra["rules"].values()) == s.n_out
        assert sum(r["in"] for r in s.extra["rules"].values()) == s.n_in
    # The cap counts grounded candidates: replays whose element is gone do not use it up.
    assert stats.extra["rules"]["repeat_past"]["rejected"].get("absent_target", 0) > 0


def test_max_per_rule_is_checked_when_parsed(capsys):
    from proposals.mine import main

    with pytest.raises(SystemExit) as done:
        main(["--run", "nowhere", "--max-per-rule", "-1"])
    assert done.value.code == 2 and "--max-per-rule" in capsys.readouterr().err
    with pytest.raises(ValueError, match="max_per_rule"):
        MineConfig(max_per_rule=-2)


def test_audit_in_worker_processes_equals_one_process(mined, bundled_run, tmp_path):
    """The audit's observations parsed by forked workers over runs of row groups: the same audit
    as one process (trajectories.parquet rewritten with 16-row groups, so that three workers each
    get several groups and every step's row lies in one of them)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(bundled_run, run)
    table = pq.read_table(run / "trajectories.parquet")
    pq.write_table(table, run / "trajectories.parquet", row_group_size=16)
    assert pq.ParquetFile(run / "trajectories.parquet").num_row_groups >= 3
    one = audit_table(run, "candidates")
    assert audit_table(run, "candidates", workers=3) == one == mined[0].extra["audit"]
    assert one["pairs"] == len(mined[2]) and one["hallucinated_targets"] == 0


def test_worker_processes_mine_what_one_process_mines(tmp_path, scripted_llm, monkeypatch):
    """Two worker processes (chunks of one site's trajectories, handed out biggest first, results
    put back in trajectory order) write the same bytes, rejects and stats as one process, and so
    do chunks read and mined 20 observations at a time: the bundled sample twice, the
    copies on two sites (22 successful trajectories, so two workers are used)."""
    import shutil

    import pyarrow as pa
    import pyarrow.compute as pc

    import proposals.pool

    table = pq.read_table(BUNDLED / "agentlab_workarena.parquet")
    copies = []
    for i in range(2):
        t = table
        for col in ("task_id", "traj_id", "site", "source_path"):
            t = t.set_column(t.schema.get_field_index(col), col,
                             pc.binary_join_element_wise(t[col], pa.scalar(f"-c{i}"), ""))
        copies.append(t)
    pq.write_table(pa.concat_tables(copies), tmp_path / "pool.parquet")
    one = tmp_path / "one"
    ingest("canonical", [tmp_path / "pool.parquet"], one)
    build_graphs(one, workers=1)
    two, small = tmp_path / "two", tmp_path / "small"
    shutil.copytree(one, two)
    shutil.copytree(one, small)
    got = {}
    for run, workers in ((one, 1), (two, 2), (small, 3)):
        if run == small:
            monkeypatch.setattr(proposals.pool, "CHUNK_ROWS", 20)
            trajs = proposals.pool.plan_trajectories(RunDir(small))
            runs = proposals.pool.row_runs({t: n for t, (_, n) in trajs.items()}, 20)
            assert len(runs) > 4 and all(sum(r.values()) <= 20 or len(r) == 1 for r in runs)
        stats = mine(run, MineConfig(sample_size=100, seed=42), scripted_llm, workers=workers, show_progress=False)
        entry = json.loads((run / "stats.json").read_text())["proposals.mine"]
        for key in ("seconds", "llm"):       # the second run finds the first one's fill answers cached
            entry.pop(key)
        got[workers] = ((run / "candidates.parquet").read_bytes(), (run / "rejects.jsonl").read_text(), entry,
                        stats.n_out)
    assert len({r["site"] for r in pq.read_table(two / "candidates.parquet", columns=["site"]).to_pylist()}) == 2
    assert got[1][3] > 0 and got[1] == got[2] == got[3]
    # The chunks spool their rows 7 at a time and the pool is gathered in row groups of 50: the
    # same rows in the same order, the same sample, rejects and stats (only the row groups differ).
    import proposals.spool

    tiny = tmp_path / "tiny"
    shutil.copytree(one, tiny)
    monkeypatch.setattr(proposals.spool, "BATCH", 7)
    monkeypatch.setattr(proposals.pool, "ROW_GROUP", 50)
    (tiny / ".mine-spool-killed").mkdir()          # what a killed mining leaves
    (tiny / ".mine-spool-killed" / "x.rows.parquet").write_bytes(b"partial")
    mine(tiny, MineConfig(sample_size=100, seed=42), scripted_llm, workers=2, show_progress=False)
    entry = json.loads((tiny / "stats.json").read_text())["proposals.mine"]
    for key in ("seconds", "llm"):
        entry.pop(key)
    with pq.ParquetFile(tiny / "candidates.parquet") as f:
        assert f.metadata.num_row_groups == -(-got[1][3] // 50) > 1
    assert pq.read_table(tiny / "candidates.parquet").to_pylist() == \
        pq.read_table(one / "candidates.parquet").to_pylist()
    digests = ("audit", "table_sha256"), ("fingerprints", "outputs")     # the file's: other row groups
    strip = [{**e, **{k: {**e[k], sub: None} for k, sub in digests}} for e in (entry, got[1][2])]
    assert (tiny / "rejects.jsonl").read_text() == got[1][1] and strip[0] == strip[1]
    assert not list(tiny.glob(".mine-spool-*"))           # the spools are removed with the stage, old ones first


def test_sample_per_step_bounds_each_steps_sample(mined, bundled_run, scripted_llm, tmp_path):
    """--sample-per-step N --sample-min-per-step M (the replay benchmark's sample): at most N
    sampled per step, none at a step with fewer than M candidates, every candidate still in the
    pool; the same draw at a step whatever the other steps hold."""
    import shutil

    _, _, rows, _, _ = mined
    run = tmp_path / "run"
    shutil.copytree(bundled_run, run)
    stats = mine(run, MineConfig(sample_size=10000, seed=42, sample_per_step=2, sample_min_per_step=4),
                 scripted_llm, workers=1)
    out = pq.read_table(run / "candidates.parquet").to_pylist()
    assert [c["pair_id"] for c in out] == [c["pair_id"] for c in rows]      # the pool does not change
    per_step = Counter((c["traj_id"], c["step_idx"]) for c in out)
    sampled = Counter((c["traj_id"], c["step_idx"]) for c in out if c["sampled"])
    assert sampled and all(sampled[s] == (2 if n >= 4 else 0) for s, n in per_step.items())
    assert any(0 < n < 4 for n in per_step.values())             # some step was left out of the sample
    assert stats.extra["audit"]["sample"]["pairs"] == sum(sampled.values())
    assert stats.extra["config"]["sample_per_step"] == 2
    # A step's draw is seeded by the step: with --sample-size too, a sampled pair was in that draw.
    mine(run, MineConfig(sample_size=5, seed=42, sample_per_step=2, sample_min_per_step=4), scripted_llm, workers=1)
    small = {c["pair_id"] for c in pq.read_table(run / "candidates.parquet").to_pylist() if c["sampled"]}
    assert len(small) == 5 and small <= {c["pair_id"] for c in out if c["sampled"]}


def test_the_audit_in_site_groups_equals_one_pass(mined, bundled_run, monkeypatch, tmp_path):
    """A pool larger than ``AUDIT_PAIRS`` is audited a group of whole sites at a time, each site a
    trajectory at a time: the same audit, key order (ties of equal counts) included, as one pass."""
    import pyarrow as pa

    import proposals.audit as audit

    whole = audit.audit_table(bundled_run, "candidates")
    monkeypatch.setattr(audit, "AUDIT_PAIRS", 10)
    monkeypatch.setattr(audit, "AUDIT_TRAJS", 1)
    grouped = audit.audit_table(bundled_run, "candidates")
    assert json.dumps(grouped) == json.dumps(whole) and whole["pairs"] == len(mined[2])
    # several sites: whole sites in name order, a group closed before it would pass the size
    pq.write_table(pa.table({"site": list("bbbbbaaaaacc")}), tmp_path / "t.parquet")
    assert audit._site_groups(tmp_path / "t.parquet", 10) == [{"a", "b"}, {"c"}]
    assert audit._site_groups(tmp_path / "t.parquet", 6) == [{"a"}, {"b"}, {"c"}]
    assert audit._site_groups(tmp_path / "t.parquet", 12) == [None]


def test_the_merge_in_a_fresh_process_writes_the_same_bytes(mined, bundled_run, tmp_path):
    """``write_sorted_apart`` (a pool of several row groups merged in a fresh process, its order and
    sample handed over as files) writes the bytes ``write_sorted`` writes in place."""
    import random
    from array import array

    from proposals.spool import write_sorted, write_sorted_apart

    table = pq.read_table(bundled_run / "candidates.parquet")
    n = table.num_rows
    assert n > 40
    pq.write_table(table.slice(0, n // 3), tmp_path / "a.parquet", row_group_size=7)
    pq.write_table(table.slice(n // 3), tmp_path / "b.parquet", row_group_size=5)
    sources = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]      # two spools
    order = array("q", random.Random(1).sample(range(n), n))
    sampled = set(random.Random(2).sample(range(n), 10))
    write_sorted(tmp_path / "here.parquet", sources, order, sampled, 16)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    write_sorted_apart(tmp_path / "apart.parquet", sources, order, sampled, 16, scratch)
    assert (tmp_path / "apart.parquet").read_bytes() == (tmp_path / "here.parquet").read_bytes()
    assert (scratch / "merge.json").exists()        # it went through the fresh process
    got = pq.read_table(tmp_path / "apart.parquet")
    assert pq.ParquetFile(tmp_path / "apart.parquet").metadata.num_row_groups == -(-n // 16)
    assert got.column("pair_id").to_pylist() == table.take(list(order)).column("pair_id").to_pylist()
    assert [i for i, s in enumerate(got.column("sampled").to_pylist()) if s] == sorted(sampled)
