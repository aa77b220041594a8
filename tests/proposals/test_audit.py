"""The audit re-derives every pair from the files: planted bad negatives are counted, whatever
the table's own ``gmcp`` column says; the report uses the audit only while it is current."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.rundir import atomic_write_parquet
from data.schema import AXIS_OF, CANDIDATE_SCHEMA, StepRecord, steps_to_table
from dataset.report import collect
from graph.build import build_graphs
from llm import LLMConfig
from proposals.audit import audit_table, main, write_audit, write_audit_apart
from proposals.mine import MineConfig, mine

OBS = "RootWebArea 'Shop'\n\t[2] form 'Order'\n\t\t[3] textbox 'Quantity'\n\t\t[4] button 'Add'\n\t\t[5] button 'Buy'"
DUP = OBS + "\n\t\t[5] button 'Buy again'"          # bid 5 twice: not uniquely resolvable


def _trajectories(run, observations):
    steps = [StepRecord(source="agentlab", site="shop.example.com", task_id="t", traj_id="a", step_idx=i,
                        intent="Buy one", url="https://shop.example.com/order", observation=obs, obs_format="indented",
                        html=None, action=action, action_error=None, thought=None, success=True,
                        source_path=f"a/{i}", meta="{}")
             for i, (obs, action) in enumerate(observations)]
    atomic_write_parquet(run / "trajectories.parquet", steps_to_table(steps))


def _cand(step, rule, pos, neg, gmcp, sampled=False):
    return {"pair_id": f"{step}-{neg}", "site": "shop.example.com", "traj_id": "a", "task_id": "t", "step_idx": step,
            "rule": rule, "axis": AXIS_OF[rule], "action_pos": pos, "action_neg": neg, "gmcp": gmcp,
            "sampled": sampled, "pos_kind": "element", "pos_bid": "5", "pos_node": "e-x", "neg_bid": "4",
            "neg_node": "e-y", "op_pos": "click", "op_neg": "click", "value_source": None, "evidence": "{}",
            "mode": "graph"}


@pytest.fixture
def planted(tmp_path):
    """Six pairs, each stored as if it were fine; the files say otherwise for four of them."""
    _trajectories(tmp_path, [(OBS, "click('5')"), (DUP, "click('4')"), (OBS, None)])
    rows = [
        _cand(0, "structurally_near", "click('5')", "click('4')", True, sampled=True),     # a GMCP
        _cand(0, "structurally_near", "click('5')", "click('99')", True, sampled=True),    # bid 99 is not in O_t
        _cand(0, "away_from_goal", "click('5')", "fill('3', '2')", True),                  # the op differs
        _cand(0, "create_a_cycle", "scroll(0, 200)", "click('4')", False),                 # a virtual positive
        _cand(1, "repeat_past", "click('4')", "click('5')", True),                         # bid 5 twice in O_t
        _cand(7, "act_too_early", "click('4')", "click('5')", False),                      # no such step
    ]
    atomic_write_parquet(tmp_path / "candidates.parquet", pa.Table.from_pylist(rows, schema=CANDIDATE_SCHEMA))
    return tmp_path


def test_planted_bad_negatives_are_counted(planted):
    a = audit_table(planted, "candidates")
    assert a["pairs"] == 6 and a["gmcp"] == 1 and a["gmcp_ratio"] == round(1 / 6, 6)
    assert a["hallucinated_targets"] == 1
    assert a["affordance_mismatch"] == 1 and a["mismatch_directions"] == {"click->fill": 1}
    assert a["virtual_positive"] == 1 and a["virtual_positive_ops"] == {"scroll": 1}
    assert a["other"] == 3
    assert a["other_reasons"] == {"negative_absent": 1, "negative_ambiguous": 1, "no_observation": 1}
    assert a["stored_gmcp_disagrees"] == 3                      # the hallucinated, the mismatch, the ambiguous
    assert a["by_rule"]["structurally_near"] == {**a["by_rule"]["structurally_near"], "pairs": 2, "gmcp": 1,
                                                  "hallucinated_targets": 1}
    assert a["by_rule"]["away_from_goal"]["affordance_mismatch"] == 1
    assert a["by_axis"]["spatial"]["hallucinated_targets"] == 1 and a["by_axis"]["temporal"]["other"] == 2
    s = a["sample"]
    assert s["pairs"] == 2 and s["gmcp"] == 1 and s["hallucinated_targets"] == 1 and s["gmcp_ratio"] == 0.5


def test_cli_json_and_exit_code(planted, capsys):
    assert main(["--run", str(planted), "--json"]) == 1          # bad pairs: the audit fails
    out = capsys.readouterr().out
    audit = json.loads(out)                                      # one JSON object on stdout
    for key in ("pairs", "gmcp_ratio", "hallucinated_targets", "by_rule", "by_axis", "sample", "table_sha256"):
        assert key in audit
    assert audit == json.loads((planted / "audit" / "candidates.json").read_text())
    assert main(["--run", str(planted)]) == 1
    assert "hallucinated targets 1" in capsys.readouterr().out
    assert main(["--run", str(planted), "--table", "preferences"]) == 2     # no such table


def test_clean_pairs_pass(tmp_path):
    _trajectories(tmp_path, [(OBS, "click('5')"), (OBS, None)])
    rows = [_cand(0, "structurally_near", "click('5')", "click('4')", True),
            _cand(0, "create_a_cycle", "click('5')", "fill('3', '2')", False)]
    atomic_write_parquet(tmp_path / "candidates.parquet", pa.Table.from_pylist(rows, schema=CANDIDATE_SCHEMA))
    assert main(["--run", str(tmp_path)]) == 0


def test_preferences_take_the_positive_at_label(planted):
    # Response order is a coin: at label 2 the positive is response_2. Read the other way round,
    # the planted pair would be a missing positive, not a hallucinated negative.
    rows = [{"traj_id": "a", "step_idx": 0, "rule": "structurally_near", "axis": "spatial", "gmcp": True, "label": 2,
             "response_1": "click('99')", "response_2": "click('5')"},
            {"traj_id": "a", "step_idx": 0, "rule": "structurally_near", "axis": "spatial", "gmcp": True, "label": 1,
             "response_1": "click('5')", "response_2": "click('4')"}]
    pq.write_table(pa.Table.from_pylist(rows), planted / "preferences.parquet")
    a = audit_table(planted, "preferences")
    assert a["pairs"] == 2 and a["gmcp"] == 1 and a["hallucinated_targets"] == 1
    assert a["other_reasons"] == {"negative_absent": 1} and "sample" not in a


def test_a_mined_file_with_a_planted_row(tmp_path):
    """Mine for real, then plant a negative on a bid the observation does not have: the stage's
    own audit said 0, the audit of the file now says 1, and the report stops using the stale
    audit until the file is audited again."""
    _trajectories(tmp_path, [(OBS, "fill('3', '1')"), (OBS, "click('4')"), (OBS, "click('5')"), (OBS, None)])
    build_graphs(tmp_path, workers=1)
    dead = LLMConfig(base_url="http://127.0.0.1:9/v1", model="none", max_retries=0, connect_timeout_s=0.2)
    stats = mine(tmp_path, MineConfig(sample_size=50), dead, workers=1)
    assert stats.extra["audit"]["hallucinated_targets"] == 0 and stats.extra["audit"]["other"] == 0
    assert collect(tmp_path)["gmcp"]["pool"][2] == "audit"
    rows = pq.read_table(tmp_path / "candidates.parquet").to_pylist()
    bad = {**rows[0], "pair_id": "planted", "action_neg": "click('404')", "neg_bid": "404", "gmcp": True}
    atomic_write_parquet(tmp_path / "candidates.parquet", pa.Table.from_pylist(rows + [bad], schema=CANDIDATE_SCHEMA))
    assert collect(tmp_path)["gmcp"]["pool"][2] == "stored flag"
    audit = write_audit(tmp_path, "candidates")
    assert audit["hallucinated_targets"] == 1 and audit["pairs"] == len(rows) + 1
    r = collect(tmp_path)
    assert r["gmcp"]["pool"] == (audit["gmcp_ratio"], len(rows) + 1, "audit")
    assert r["gmcp"]["pool"][0] < sum(c["gmcp"] for c in rows + [bad]) / (len(rows) + 1)
    # Hand-edited files are audited as they are, never refused as stale: not even with the
    # stage records and the graphs gone.
    (tmp_path / "stats.json").unlink()
    import shutil

    shutil.rmtree(tmp_path / "graphs")
    assert main(["--run", str(tmp_path)]) == 1
    assert write_audit(tmp_path, "candidates") == audit
    # The audit mining runs after its merge, in a fresh process: the same audit, the same file; its
    # failure is the mining's, with the audit's own words.
    (tmp_path / "audit" / "candidates.json").unlink()
    assert write_audit_apart(tmp_path, "candidates") == audit
    assert json.loads((tmp_path / "audit" / "candidates.json").read_text()) == audit
    with pytest.raises(RuntimeError, match="FileNotFoundError: .*candidates.parquet not found"):
        write_audit_apart(tmp_path / "nowhere", "candidates")


TWO_BUY = OBS + "\n\t\t[6] button 'Buy'"          # two 'Buy' buttons: told apart only by their ordinal


def test_a_node_with_two_bids_is_counted(tmp_path, monkeypatch, capsys):
    """The audit re-derives each negative's persistent node from O_t with the identity function:
    under a phi that cannot tell the two 'Buy' buttons apart (no sibling ordinal), click('5')
    targets a node with two bids, and is counted as an ambiguous target (exit code 1), though
    bid 5 itself occurs once. Under the real phi the same file audits clean."""
    from graph.identity import ElementContext

    _trajectories(tmp_path, [(TWO_BUY, "click('4')"), (TWO_BUY, None)])
    rows = [_cand(0, "structurally_near", "click('4')", "click('5')", True)]
    atomic_write_parquet(tmp_path / "candidates.parquet", pa.Table.from_pylist(rows, schema=CANDIDATE_SCHEMA))
    clean = audit_table(tmp_path, "candidates")
    assert clean["ambiguous_targets"] == 0 and clean["gmcp"] == 1
    assert main(["--run", str(tmp_path)]) == 0
    monkeypatch.setattr(ElementContext, "persistent_id",
                        lambda self, site: f"e-{site}|{self.page}|{self.role}|{self.name}")
    capsys.readouterr()
    assert main(["--run", str(tmp_path), "--json"]) == 1
    a = json.loads(capsys.readouterr().out)
    assert a["ambiguous_targets"] == 1 and a["hallucinated_targets"] == 0 and a["gmcp"] == 0
    assert a["other_reasons"] == {"negative_node_ambiguous": 1} and a["stored_gmcp_disagrees"] == 1
    assert a["by_rule"]["structurally_near"]["ambiguous_targets"] == 1


def test_every_target_of_a_drag_is_checked(tmp_path):
    """drag_and_drop's second target must be in O_t exactly once too; the first target alone
    decides whether the negative is hallucinated (that count is unchanged)."""
    _trajectories(tmp_path, [(OBS, "click('5')"), (OBS, None)])
    rows = [_cand(0, "structurally_near", "click('5')", "drag_and_drop('4', '3')", False),
            {**_cand(0, "away_from_goal", "click('5')", "drag_and_drop('4', '99')", False), "pair_id": "x"}]
    atomic_write_parquet(tmp_path / "candidates.parquet", pa.Table.from_pylist(rows, schema=CANDIDATE_SCHEMA))
    a = audit_table(tmp_path, "candidates")
    assert a["affordance_mismatch"] == 1 and a["other_reasons"] == {"second_target_absent": 1}
    assert a["hallucinated_targets"] == 0 and a["ambiguous_targets"] == 0
    assert main(["--run", str(tmp_path)]) == 1


def test_nodes_are_resolved_with_the_identity_the_graphs_were_built_with(planted, capsys):
    """The manifest says which phi built the graphs (and mined their negatives); No-Graph
    candidates were mined with the default; a manifest naming no known phi is a one-line error."""
    from graph.identity import DEFAULT_IDENTITY, IDENTITIES
    from proposals.audit import mined_identity

    other = next(i for i in IDENTITIES if i != DEFAULT_IDENTITY)
    assert mined_identity(planted) == DEFAULT_IDENTITY                       # no graphs
    (planted / "graphs").mkdir()
    (planted / "graphs" / "manifest.json").write_text(json.dumps({"identity": other, "sites": {}}))
    assert mined_identity(planted) == other
    t = pq.read_table(planted / "candidates.parquet")
    pq.write_table(t.set_column(t.schema.get_field_index("mode"), "mode", pa.array(["no_graph"] * len(t))),
                   planted / "candidates.parquet")
    assert mined_identity(planted) == DEFAULT_IDENTITY
    (planted / "graphs" / "manifest.json").write_text(json.dumps({"identity": "phi?", "sites": {}}))
    _trajectories(planted, [(OBS, "click('5')")])
    pq.write_table(t, planted / "candidates.parquet")
    assert main(["--run", str(planted)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "phi?" in err and err.count("\n") == 1
