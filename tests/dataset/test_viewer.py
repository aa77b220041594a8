"""The pair viewer without a browser: its routes (through Starlette's test client), its refusals,
the audit's answers file and the §4.3 figures. The Chromium tests are in test_viewer_browser.py."""

from __future__ import annotations

import json
import math
import shutil

import networkx as nx
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from dataset.viewer.app import make_app
from dataset.viewer.audit import (
    HUMAN_SCHEMA,
    AuditLog,
    annotator_summary,
    answers_path,
    cohen_kappa,
    draw_sample,
    summarize,
    wilson,
)
from dataset.viewer.cli import main
from dataset.viewer.graphview import neighbourhood_layout
from dataset.viewer.source import PairSource
from viewer_run import add_replay, make_mined_run, make_viewer_run, replay_evidence

LOCAL = "http://127.0.0.1:8765"


@pytest.fixture(scope="module")
def viewer_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewer_run")
    return root, make_viewer_run(root)


@pytest.fixture(scope="module")
def source(viewer_run):
    return PairSource.open(viewer_run[0])


def test_api_lists_every_pair_kept_and_discarded(viewer_run, source):
    root, made = viewer_run
    client = TestClient(make_app(source), base_url=LOCAL)
    got = client.get("/api/pairs").json()
    kept = {r["pair_id"] for r in pq.read_table(root / "preferences.parquet").to_pylist()}
    assert {p["pair_id"] for p in got} == {p["pair_id"] for p in made["pairs"]}
    assert {p["pair_id"] for p in got if p["kept"]} == kept and len(kept) == len(got) - 1
    by_id = {p["pair_id"]: p for p in got}
    for p in made["pairs"]:
        assert (by_id[p["pair_id"]]["action_pos"], by_id[p["pair_id"]]["action_neg"], by_id[p["pair_id"]]["rule"]) == \
            (p["action_pos"], p["action_neg"], p["rule"])
    assert by_id[made["discarded"]]["teacher_choice"] == "neg" and not by_id[made["discarded"]]["kept"]

    # the list's filters are query parameters (they work without script)
    rule = made["pairs"][0]["rule"]
    page = client.get("/", params={"rule": rule}).text
    assert page.count('<tr class="') == sum(p["rule"] == rule for p in made["pairs"])
    assert client.get("/", params={"kept": "discarded"}).text.count('<tr class="') == 1


@pytest.fixture(scope="module")
def replay_run(viewer_run, tmp_path_factory):
    """The viewer run with replay outcomes, as ``teacher.verify --verifier replay`` writes them:
    the discarded pair ``equivalent``, the kept ones ``harmful``, ``detour``, ``not_executable``
    in turn, and the last kept pair left without one (null: shown as none)."""
    root, made = viewer_run
    copy = tmp_path_factory.mktemp("replay_run") / "run"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("audit", "*.audit", ".llm_cache"))
    kept = sorted(p["pair_id"] for p in made["pairs"] if p["pair_id"] != made["discarded"])
    outcomes = {pid: ("harmful", "detour", "not_executable")[i % 3] for i, pid in enumerate(kept[:-1])}
    outcomes[made["discarded"]] = "equivalent"
    add_replay(copy, outcomes)
    return copy, outcomes, kept[-1]


def test_replay_outcomes_in_the_api_the_list_filter_and_the_pair_page(replay_run):
    root, outcomes, unreplayed = replay_run
    client = TestClient(make_app(PairSource.open(root)), base_url=LOCAL)
    got = {p["pair_id"]: p["replay_outcome"] for p in client.get("/api/pairs").json()}
    assert got == {**outcomes, unreplayed: None}

    # the list: a replay filter with its counts, and the filter keeps the pairs of that outcome
    page = client.get("/").text
    assert 'name="replay"' in page and "replay outcome" in page
    for outcome in set(outcomes.values()) | {"none"}:
        n = sum(v == outcome for v in outcomes.values()) or 1     # "none": the one unreplayed pair
        assert f'<option value="{outcome}">{outcome} ({n})</option>' in page
        shown = client.get("/", params={"replay": outcome}).text
        assert shown.count('<tr class="') == n, outcome
    equivalent = client.get("/", params={"replay": "equivalent"}).text
    assert f'data-pair="{[p for p, o in outcomes.items() if o == "equivalent"][0]}"' in equivalent

    # the pair page: the outcome, the two hashes' comparison, rewards, the solver's steps and actions
    for pid, outcome in outcomes.items():
        page = client.get(f"/pair/{pid}").text
        ev = replay_evidence(pid, outcome)
        assert f'class="outcome outcome-{outcome}">{outcome}</span>' in page
        same = "the same (equal AXTree hashes)" if outcome == "equivalent" else "different (the AXTree hashes differ)"
        assert f"resulting states: {same}" in page
        for k in ("pos", "neg"):
            row = page.split(f'<tr class="branch-{k}">')[1].split("</tr>")[0]
            assert f"<code>{ev[k]['hash']}</code>" in row and f"<td>{ev[k]['solver_steps']}</td>" in row
            assert f"<td>{ev[k]['final_reward']}</td>" in row
        assert ("solver: <code>click(&#39;s0&#39;)</code>" in page)
    page = client.get(f"/pair/{unreplayed}").text
    assert 'id="replay"' not in page and "resulting states" not in page


def test_replay_mismatch_and_unreadable_evidence_are_shown(tmp_path):
    from dataset.viewer.source import replay_view

    ev = {"task": "click-test", "seed": 1, "step": 2, "observation_hash": "aa", "mismatch": "observation",
          "recorded_hash": "aa", "replayed_hash": "bb"}
    v = replay_view("replay_mismatch", json.dumps(ev))
    assert v["mismatch"] == {"mismatch": "observation", "recorded_hash": "aa", "replayed_hash": "bb"}
    assert v["branches"] == {} and v["same_state"] is None and v["where"]["seed"] == 1
    assert replay_view(None, json.dumps(ev)) is None
    assert replay_view("harmful", "not json")["raw"] == "not json"


def test_a_run_without_replay_shows_none(viewer_run, source, tmp_path):
    root, made = viewer_run
    client = TestClient(make_app(source), base_url=LOCAL)
    assert all(p["replay_outcome"] is None for p in client.get("/api/pairs").json())
    assert 'name="replay"' not in client.get("/").text
    for pid in (made["discarded"], made["pairs"][0]["pair_id"]):
        assert 'id="replay"' not in client.get(f"/pair/{pid}").text

    # a run verified before the replay verifier existed has no replay columns at all: read as none
    old = tmp_path / "old"
    shutil.copytree(root, old, ignore=shutil.ignore_patterns("audit", "*.audit", ".llm_cache"))
    for name in ("preferences.parquet", "discarded.parquet"):
        table = pq.read_table(old / name)
        pq.write_table(table.drop_columns(["replay_outcome", "replay_evidence"]), old / name)
    old_source = PairSource.open(old)
    assert len(old_source.pairs) == len(made["pairs"])
    assert all(p["replay_outcome"] is None for p in old_source.pairs)
    assert TestClient(make_app(old_source), base_url=LOCAL).get(f"/pair/{made['discarded']}").status_code == 200


def test_pair_page_shows_state_targets_attempts_and_prompt(viewer_run, source):
    root, made = viewer_run
    client = TestClient(make_app(source), base_url=LOCAL)
    both = 0
    for pair in made["pairs"]:
        page = client.get(f"/pair/{pair['pair_id']}").text
        steps = pq.read_table(root / "trajectories.parquet", filters=[("traj_id", "=", pair["traj_id"]),
                                                                      ("step_idx", "=", pair["step_idx"])])
        lines = steps.column("observation")[0].as_py().splitlines()
        for k in ("pos", "neg"):
            present = any(line.strip().startswith(f"[{pair[k + '_bid']}] ") for line in lines)
            assert (f'class="line target target-{k}" id="target-{k}"' in page) == present, (pair["pair_id"], k)
            assert (f"target {pair[k + '_bid']} not in O_t" in page) == (not present)
        pos_present = any(line.strip().startswith(f"[{pair['pos_bid']}] ") for line in lines)
        if pair["pair_id"] != made["hostile"]:
            assert ("audit class</dt><dd>gmcp<" in page) == pos_present
        both += pos_present
    assert both >= 4      # most positives are on the page (some recorded bids lack their frame prefix)
    assert "The prompt the teacher saw" in page and "#### Assistant Responses ####" in page
    assert "audit class</dt><dd>gmcp" in page
    discarded = client.get(f"/pair/{made['discarded']}").text
    assert discarded.count('class="attempt disagree"') == 5 and "re-rendered" in discarded
    assert client.get("/pair/nope").status_code == 404


def test_hostile_page_text_is_escaped_under_a_strict_csp(viewer_run, source):
    root, made = viewer_run
    client = TestClient(make_app(source), base_url=LOCAL)
    r = client.get(f"/pair/{made['hostile']}")
    assert "<script>window" not in r.text and "<img src=x" not in r.text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in r.text
    assert "&lt;Answer&gt;Response 2&lt;/Answer&gt;" in r.text
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
    # every script the pages load is a file of the viewer's own (no inline script)
    assert r.text.count("<script") == 1 and '<script src="/static/viewer.js" defer></script>' in r.text


def test_refuses_other_hosts_origins_and_paths(viewer_run, source, tmp_path):
    client = TestClient(make_app(source), base_url=LOCAL)
    assert client.get("/", headers={"host": "attacker.example:8765"}).status_code == 400
    assert client.get("/static/viewer.css").status_code == 200
    for path in ("/static/../app.py", "/static/%2e%2e/app.py", "/static/..%2fapp.py"):
        assert client.get(path).status_code == 404, path
    assert client.get("/audit").status_code == 404              # no audit: read-only
    allowed = TestClient(make_app(source, host="viewer.lan"), base_url="http://viewer.lan:8765")
    assert allowed.get("/").status_code == 200
    audit = TestClient(make_app(source, audit="eve", sample=2), base_url=LOCAL)
    r = audit.post("/audit/0", data={"answer": "1"}, headers={"origin": "http://attacker.example"})
    assert r.status_code == 403
    assert audit.post("/audit/0", data={"answer": "maybe"}).status_code == 400
    for name in ("../x", "a/b", ".hidden", ""):
        with pytest.raises(ValueError, match="annotator name"):
            make_app(source, audit=name)


def test_audit_answers_are_atomic_resumable_and_pinned(source, tmp_path):
    sample = draw_sample(source.pairs, 4, seed=7)
    assert sample == draw_sample(list(reversed(source.pairs)), 4, seed=7)      # seeded, order-free
    assert all(p["kept"] for p in sample) and {p["pos_shown"] for p in draw_sample(source.pairs, 7, 7)} == {1, 2}
    path = answers_path(tmp_path, "ann")
    log = AuditLog(path, "ann", sample, 7)
    assert log.next_position() == 0
    log.answer(0, "1", "first")
    log.answer(1, "both")
    log.answer(0, "2", " changed ")                   # an answer again replaces the earlier one
    # no temporary file left; the lock file that keeps a second viewer off this audit
    assert sorted(p.name for p in tmp_path.iterdir()) == [".human-ann.parquet.lock", "human-ann.parquet"]
    table = pq.read_table(path)
    assert table.schema.equals(HUMAN_SCHEMA) and table.num_rows == 2
    log.close()
    again = AuditLog(path, "ann", sample, 7)
    assert again.next_position() == 2
    row = again.rows[sample[0]["pair_id"]]
    assert row["answer"] == "2" and row["note"] == "changed"
    assert row["choice"] == ("pos" if sample[0]["pos_shown"] == 2 else "neg")
    again.close()
    with pytest.raises(ValueError, match="another sample"):
        AuditLog(path, "ann", draw_sample(source.pairs, 4, seed=8), 8)


def test_wilson_and_kappa_against_their_formulas():
    w = wilson(12, 100)
    z, p, n = 1.959963984540054, 0.12, 100
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert w["rate"] == 0.12 and w["low"] == pytest.approx(centre - half) and w["high"] == pytest.approx(centre + half)
    assert wilson(0, 0)["rate"] is None
    a = ["pos", "pos", "neg", "both", "pos", "neg"]
    b = ["pos", "neg", "neg", "both", "pos", "pos"]
    assert cohen_kappa(a, b) == pytest.approx(5 / 11)     # p_o = 24/36, p_e = 14/36
    assert cohen_kappa(a, a) == 1.0 and cohen_kappa(["pos"] * 3, ["pos"] * 3) is None


def test_summary_figures_and_cli(viewer_run, source, tmp_path, capsys):
    rows = [{"choice": c, "teacher_choice": t, "rule": r, "axis": "spatial"} for c, t, r in
            [("pos", "pos", "a"), ("neg", "pos", "a"), ("both", "pos", "b"), ("cannot_tell", "pos", "b"),
             ("pos", None, "b")]]
    s = annotator_summary(rows)
    assert (s["false_negatives"]["k"], s["false_negatives"]["n"]) == (2, 4)
    assert s["by_rule"]["a"]["k"] == 1 and s["by_rule"]["b"]["n"] == 2
    assert (s["agree_label"]["k"], s["agree_label"]["n"]) == (2, 3)
    assert (s["agree_teacher"]["k"], s["agree_teacher"]["n"]) == (1, 2)

    # two annotators on one sample of the run: the CLI prints both, and their kappa
    sample = draw_sample(source.pairs, 3, seed=42)
    for name, answers in (("ann", ["1", "2", "both"]), ("bob", ["1", "2", "cannot_tell"])):
        log = AuditLog(answers_path(source.audit_dir, name), name, sample, 42)
        for i, answer in enumerate(answers):
            log.answer(i, answer)
    summary = summarize(source.audit_dir)
    assert summary["kappa"][0]["annotators"] == ["ann", "bob"] and summary["kappa"][0]["pairs"] == 3
    assert main(["summary", "--run", str(viewer_run[0])]) == 0
    out = capsys.readouterr().out
    assert "annotator ann: 3 answers" in out and "Cohen's kappa ann vs bob" in out and "95% Wilson" in out
    assert "replay" not in out          # an LLM-verified run has no replay truth to compare with
    for path in source.audit_dir.glob("human-*.parquet"):
        path.unlink()


def test_summary_against_the_replay_truth(replay_run, capsys):
    rows = [{"pair_id": p, "choice": c, "teacher_choice": "pos", "rule": "r", "axis": "a"} for p, c in
            [("e1", "both"), ("e2", "pos"), ("e3", "cannot_tell"), ("h1", "pos"), ("h2", "both"), ("d1", "neg"),
             ("m1", "both"), ("x1", "both")]]
    replay = {"e1": "equivalent", "e2": "equivalent", "e3": "equivalent", "h1": "harmful", "h2": "harmful",
              "d1": "detour", "m1": "replay_mismatch", "x1": None}
    r = annotator_summary(rows, replay)["replay"]
    # judged: e1 e2 (equivalent), h1 h2 d1 (positive better); e3 cannot tell, m1 and x1 have no truth
    assert (r["agree"]["k"], r["agree"]["n"]) == (2, 5)              # e1 (both), h1 (pos)
    assert (r["both_if_equivalent"]["k"], r["both_if_equivalent"]["n"]) == (1, 2)
    assert (r["both_if_not"]["k"], r["both_if_not"]["n"]) == (1, 3)
    assert {o: (w["k"], w["n"]) for o, w in r["by_outcome"].items()} == \
        {"equivalent": (1, 2), "harmful": (1, 2), "detour": (1, 1)}
    assert "replay" not in annotator_summary(rows) and annotator_summary(rows, {"x1": None})["replay"] is None

    # the CLI on a replay-verified run: an audit of its kept pairs, compared with their outcomes
    root, outcomes, unreplayed = replay_run
    source = PairSource.open(root)
    sample = draw_sample(source.pairs, 4, seed=42)
    log = AuditLog(answers_path(source.audit_dir, "ann"), "ann", sample, 42)
    for i, p in enumerate(sample):          # the positive everywhere but in the first pair: "both"
        log.answer(i, "both" if i == 0 else str(p["pos_shown"]))
    truth = [p for p in sample if outcomes.get(p["pair_id"])]
    assert len(truth) >= 3
    assert main(["summary", "--run", str(root), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["annotators"]["ann"]["replay"]
    assert got["agree"]["n"] == len(truth) and got["agree"]["k"] == len(truth) - (sample[0] in truth)
    assert got["both_if_equivalent"]["n"] == 0          # replay discards equivalent pairs: none sampled
    assert main(["summary", "--run", str(root)]) == 0
    assert "agreement with the replay truth" in capsys.readouterr().out


def test_cli_needs_one_source(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and "--run RUN or --bench FILE" in capsys.readouterr().err


def test_webprmbench_file_is_viewed_and_audited(viewer_run):
    root, made = viewer_run
    bench = PairSource.open(bench=made["bench"])
    kept = {r["pair_id"]: r for r in pq.read_table(root / "preferences.parquet").to_pylist()}
    assert {p["pair_id"] for p in bench.pairs} == set(kept)
    for p in bench.pairs:
        assert p["action_pos"] == kept[p["pair_id"]]["action_pos"] and p["rule"] == kept[p["pair_id"]]["rule"]
    assert bench.audit_dir == made["bench"].with_name("webprmbench.audit")
    client = TestClient(make_app(bench, audit="ann", sample=3), base_url=LOCAL)
    first = client.get("/audit").url.path
    page = client.get(first).text
    assert "Response 1" in page and "rule" not in page.split("<main>")[1].split("Observation")[0].lower()
    assert client.post(first, data={"answer": "both"}, follow_redirects=False).status_code == 303
    assert pq.read_table(bench.audit_dir / "human-ann.parquet").num_rows == 1
    assert client.get(f"/pair/{bench.pairs[0]['pair_id']}").status_code == 200


def test_graph_neighbourhood_layout():
    G = nx.MultiDiGraph()
    for n, role in (("root", "main"), ("nav", "navigation"), ("p", "link"), ("q", "button"), ("next", "link"),
                    ("far", "link")):
        G.add_node(n, role=role, name=n.upper(), url="/x", kind="element")
    G.add_edge("p", "nav", key="containment", type="containment", count=3)
    G.add_edge("nav", "root", key="containment", type="containment", count=3)
    G.add_edge("q", "root", key="containment", type="containment", count=1)
    G.add_edge("p", "next", key="interaction:click", type="interaction", op="click", count=2)
    G.add_edge("next", "far", key="interaction:click", type="interaction", op="click", count=2)
    lay = neighbourhood_layout(G, "p", "q")
    kinds = {n["id"]: n["kind"] for n in lay["nodes"]}
    assert kinds == {"root": "ancestor", "nav": "ancestor", "p": "pos", "q": "neg", "next": "temporal"}
    ys = {n["id"]: n["y"] for n in lay["nodes"]}
    assert ys["root"] < ys["nav"] < ys["p"] == ys["q"] < ys["next"]
    assert len(lay["edges"]) == 4 and {e["type"] for e in lay["edges"]} == {"containment", "interaction"}
    assert neighbourhood_layout(G, "missing", None) is None


def test_graph_view_on_a_mined_run(tmp_path):
    """The real stages (ingest, graph.build, proposals.mine, the scripted teacher): every pair page
    draws its neighbourhood with both targets' nodes."""
    make_mined_run(tmp_path)
    source = PairSource.open(tmp_path)
    client = TestClient(make_app(source), base_url=LOCAL)
    assert len(source.pairs) == 6
    for p in source.pairs:
        page = client.get(f"/pair/{p['pair_id']}").text
        assert 'class="ieg"' in page and '<g class="node pos">' in page and '<g class="node neg">' in page, p["pair_id"]


@pytest.mark.parametrize("argv,message", [(["--run", "/no/such/run"], "no such run directory"),
                                          (["summary", "--bench", "/no/such.parquet"], "no such file"),
                                          (["--run", ".", "--port", "70000"], "--port")])
def test_cli_refuses_missing_sources_and_bad_ports(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_webprmbench_file_with_string_prompts(viewer_run, tmp_path):
    """A WebPRMBench file whose prompt is one string (no chat messages) and has only the format's
    own columns reads the same."""
    import pyarrow as pa

    rows = pq.read_table(viewer_run[1]["bench"]).to_pylist()
    flat = [{"state_idx": r["state_idx"], "pair_idx": r["pair_idx"], "expected": r["expected"],
             "prompt": "\n\n".join(m["content"] for m in r["prompt"] if m["role"] != "system")} for r in rows]
    path = tmp_path / "other.parquet"
    pq.write_table(pa.Table.from_pylist(flat, schema=pa.schema([("state_idx", pa.int32()), ("pair_idx", pa.int32()),
                                                                 ("expected", pa.int8()), ("prompt", pa.string())])),
                   path)
    source = PairSource.open(bench=path)
    assert len(source.pairs) == len(rows)
    assert source.pairs[0]["pair_id"] == f"{rows[0]['state_idx']}-{rows[0]['pair_idx']}"
    page = TestClient(make_app(source), base_url=LOCAL).get(f"/pair/{source.pairs[0]['pair_id']}").text
    assert "<h4>user</h4>" in page and 'class="line target target-' in page


def test_observation_marks_every_target_line_and_anchors_the_first():
    from dataset.viewer.source import observation

    text = ("RootWebArea 'Shop'\n\t[10] navigation 'Main'\n\t\t[11] link 'Home'\n\t\t[12] textbox 'Search'\n"
            "\t[13] button 'Go'\n\t[12] textbox 'Search'")
    same = observation(text, None, "fill('12', 'shoes')", "fill('12', 'boots')")
    marks = [(line["mark"], line["anchor"]) for line in same.lines]
    assert marks[3] == ("both", "target-pos") and marks[5] == ("both", None)  # a repeated bid: marked, not anchored
    assert same.anchors == {"pos": "target-pos", "neg": "target-pos"}
    assert same.paths["pos"] == ["RootWebArea 'Shop'", "navigation 'Main'", "textbox 'Search'"]
    drag = observation(text, None, "click('11')", "drag_and_drop('13', '11')")
    assert [line["mark"] for line in drag.lines][2:5] == ["both", None, "neg"]
    assert drag.anchors == {"pos": "target-pos", "neg": "target-pos"}      # the first line holding each target
    virtual = observation(text, None, "scroll(0, 300)", "click('99')")
    assert virtual.anchors == {} and virtual.paths == {} and virtual.targets == {"pos": [], "neg": ["99"]}
