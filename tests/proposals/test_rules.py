"""The rules as the paper states them, on small hand-made trajectories: each rule ranks by its
own criterion (``--prefer-same-op`` is an option, off by default), an element takes its most
frequently demonstrated op, away_from_goal never calls an unreachable element "farther", and
create_a_cycle keeps the tightest loop (``--selection rank``); by default each rule's negatives are
drawn from its q_G (seeded, likelier as the rule's score says), a negative drawn by several rules
lists them all, and a failed fill gives its slot to the rule's next draw."""

import json
import random
from collections import Counter

import pyarrow.parquet as pq
import pytest

from data.rundir import atomic_write_parquet
from data.schema import RULES, StepRecord, steps_to_table
from graph.axtree import parse_axtree
from graph.build import build_graphs
from llm import LLMConfig
from llm.serve import serve_in_thread
from proposals.affordance import choose_op
from proposals.gmcp_ratio import GmcpRatioError, target_counts
from proposals.graphindex import INF, GraphIndex
from proposals.mine import MineConfig, main, mine
from proposals.rules import Params, Proposal, draw

SHOP = ("RootWebArea 'Shop'\n\t[2] form 'Order'\n\t\t[3] textbox 'Quantity'\n\t\t[4] button 'Add'\n"
        "\t\t[5] button 'Buy'\n\t[8] link 'Help'")
# Every value the rules need is demonstrated: no LLM is ever asked (a dead URL proves it).
NO_LLM = LLMConfig(base_url="http://127.0.0.1:9/v1", model="none", max_retries=0, connect_timeout_s=0.2)


def _step(i, action, obs=SHOP, url="https://shop.example.com/order"):
    return StepRecord(source="agentlab", site="shop.example.com", task_id="t", traj_id="a", step_idx=i,
                      intent="Buy one", url=url, observation=obs, obs_format="indented", html=None, action=action,
                      action_error=None, thought=None, success=True, source_path=f"a/{i}", meta="{}")


@pytest.fixture
def shop_run(tmp_path):
    """Type a quantity, press Enter twice in it, Add, Buy. The quantity box is demonstrated
    with press twice and fill once; 'Help' is never used (unreachable in the graph)."""
    steps = [_step(0, "fill('3', '1')"), _step(1, "press('3', 'Enter')"), _step(2, "press('3', 'Enter')"),
             _step(3, "click('4')"), _step(4, "click('5')"), _step(5, None)]
    atomic_write_parquet(tmp_path / "trajectories.parquet", steps_to_table(steps))
    build_graphs(tmp_path, workers=1)
    return tmp_path


def _mine(run, axes=("spatial", "temporal", "spatiotemporal"), max_per_rule=3, selection="rank", seed=42, llm=NO_LLM,
          **params):
    stats = mine(run, MineConfig(sample_size=50, axes=axes, max_per_rule=max_per_rule, selection=selection, seed=seed,
                                 params=Params(**params)), llm, workers=1, show_progress=False)
    return stats, pq.read_table(run / "candidates.parquet").to_pylist()


def _negs(rows, step, rule):
    return [c["action_neg"] for c in rows if c["step_idx"] == step and c["rule"] == rule]


def test_choose_op_takes_the_most_frequent_demonstrated_op():
    tree = parse_axtree("RootWebArea 'x'\n\t[3] textbox 'Quantity'")
    box = tree.nodes[1]
    assert choose_op(tree, box, ["press", "fill"], "click") == ("press", "graph")
    assert choose_op(tree, box, ["press", "fill"], "fill") == ("press", "graph")
    assert choose_op(tree, box, ["press", "fill"], "fill", prefer_same_op=True) == ("fill", "graph")
    assert choose_op(tree, box, ["drag_and_drop"], "click") == ("fill", "role")     # no usable op: the role's


def test_an_element_takes_its_most_frequent_op(shop_run):
    # Step 3 clicks 'Add'; its nearest neighbour is the quantity box, demonstrated with press
    # twice and fill once: the negative presses (alphabetical order would have filled).
    _, rows = _mine(shop_run)
    assert "press('3', 'Enter')" in _negs(rows, 3, "structurally_near")
    # No rule gives the box another op (only replays of the demonstrated fill keep theirs).
    assert not [c for c in rows if c["action_neg"].startswith("fill('3'") and c["value_source"] != "action"]


def test_rules_rank_by_their_own_criterion_unless_prefer_same_op(shop_run):
    # One negative per rule: structurally_near keeps the nearest element (document order breaks
    # the tie), whatever its op; --prefer-same-op keeps the nearest one taking the positive's op.
    stats, rows = _mine(shop_run, max_per_rule=1)
    assert _negs(rows, 3, "structurally_near") == ["press('3', 'Enter')"]
    assert stats.extra["config"]["params"]["prefer_same_op"] is False
    assert main(["--run", str(shop_run), "--max-per-rule", "1", "--prefer-same-op", "--workers", "1",
                 "--selection", "rank", "--fill-base-url", NO_LLM.base_url, "--fill-model", "none"]) == 0
    rows = pq.read_table(shop_run / "candidates.parquet").to_pylist()
    assert _negs(rows, 3, "structurally_near") == ["click('5')"]
    stats = json.loads((shop_run / "stats.json").read_text())["proposals.mine"]
    assert stats["config"]["params"]["prefer_same_op"] is True


def test_away_from_goal_never_proposes_unreachable_elements(shop_run):
    _, rows = _mine(shop_run, axes=("spatiotemporal",), max_per_rule=10)
    site = shop_run / "graphs" / "shop.example.com"
    graph = GraphIndex(site)
    named = pq.read_table(site / "nodes.parquet", columns=["node_id", "name"]).to_pylist()
    node = {r["name"]: r["node_id"] for r in named}
    goal, help_link = node["Buy"], node["Help"]
    # The link is on every page (so the old rule, which counted infinity as farther, proposed
    # it), but no path joins it to the goal.
    assert graph.distance(goal, help_link) == INF and graph.distance(goal, node["Add"]) == 1
    away = [c for c in rows if c["rule"] == "away_from_goal"]
    # Step 3 (Add, 1 hop from Buy): the quantity box is 2 hops away, strictly and finitely farther.
    assert "press('3', 'Enter')" in _negs(rows, 3, "away_from_goal")
    assert all(c["action_neg"] != "click('8')" for c in away)
    for c in away:
        ev = json.loads(c["evidence"])
        assert ev["neg_hops"] is not None and ev["pos_hops"] < ev["neg_hops"] < INF


def _page(letter, links):
    lines = [f"RootWebArea 'Page {letter}'"] + [f"\t[{bid}] {role} '{name}'" + (f", url='{url}'" if url else "")
                                                for bid, role, name, url in links]
    return "\n".join(lines)


@pytest.fixture
def cycle_run(tmp_path):
    """A -> B -> C; on C, links back to A (left two steps ago) and to B (one step ago)."""
    base = "https://shop.example.com"
    steps = [
        _step(0, "click('10')", _page("A", [("10", "link", "To B", f"{base}/b")]), f"{base}/a"),
        _step(1, "click('20')", _page("B", [("20", "link", "To C", f"{base}/c")]), f"{base}/b"),
        _step(2, "click('33')", _page("C", [("31", "link", "Back to A", f"{base}/a"),
                                           ("32", "link", "Back to B", f"{base}/b"),
                                           ("33", "button", "Done", None)]), f"{base}/c"),
        _step(3, None, _page("D", [("40", "link", "Home", None)]), f"{base}/d"),
    ]
    atomic_write_parquet(tmp_path / "trajectories.parquet", steps_to_table(steps))
    build_graphs(tmp_path, workers=1)
    return tmp_path


def test_create_a_cycle_keeps_the_tightest_loop(cycle_run):
    _, rows = _mine(cycle_run, max_per_rule=1)
    # 'Back to A' comes first on the page, but B was left one step ago, A two.
    got = [c for c in rows if c["step_idx"] == 2 and c["rule"] == "create_a_cycle"]
    assert [c["action_neg"] for c in got] == ["click('32')"]
    assert json.loads(got[0]["evidence"])["loop_steps"] == 1


def test_draw_takes_each_candidate_in_proportion_to_its_weight():
    props = [Proposal("a", "1", {}, weight=1.0), Proposal("b", "2", {}, weight=3.0)]
    firsts = Counter(draw(props, random.Random(i))[0].node for i in range(4000))
    assert 0.72 < firsts["b"] / 4000 < 0.78
    assert draw(props, random.Random(7)) == draw(props, random.Random(7))          # seeded
    # --prefer-same-op: group 0 (the positive's op) is drawn out first, whatever the weights.
    props = [Proposal("a", "1", {}, weight=100.0, group=1), Proposal("b", "2", {}, weight=0.01)]
    assert all(draw(props, random.Random(i))[0].node == "b" for i in range(50))


def test_create_a_cycle_samples_the_tighter_loop_more_often(cycle_run):
    # q_G of create_a_cycle: p proportional to 1 / loop_steps, so 'Back to B' (1 step) is drawn
    # first about twice as often as 'Back to A' (2 steps); the same seed draws the same.
    picks = Counter()
    for seed in range(16):
        stats, rows = _mine(cycle_run, axes=("spatiotemporal",), max_per_rule=1, selection="sample", seed=seed)
        picks.update(c["action_neg"] for c in rows if c["step_idx"] == 2 and c["rule"] == "create_a_cycle")
    assert stats.extra["config"]["selection"] == "sample"
    assert picks["click('32')"] > picks["click('31')"] > 0 and sum(picks.values()) == 16
    again = _mine(cycle_run, axes=("spatiotemporal",), max_per_rule=1, selection="sample", seed=15)[1]
    assert again == rows


def test_a_negative_drawn_by_several_rules_lists_them_all(shop_run):
    # Step 3 (click Add): pressing Enter in the quantity box is structurally near, farther from
    # the goal, and the action of the step before: one row, every rule that drew it.
    _, rows = _mine(shop_run, max_per_rule=0, selection="sample")
    press = [c for c in rows if c["step_idx"] == 3 and c["action_neg"] == "press('3', 'Enter')"]
    assert len(press) == 1
    assert press[0]["rules"][0] == press[0]["rule"]
    assert {"structurally_near", "away_from_goal", "repeat_past"} <= set(press[0]["rules"]) <= set(RULES)
    assert all(c["rules"][0] == c["rule"] for c in rows)
    steps = Counter((c["step_idx"], c["action_neg"]) for c in rows)
    assert max(steps.values()) == 1


FIELDS = ("RootWebArea 'Form'\n\t[2] form 'Order'\n\t\t[3] textbox 'Alpha'\n\t\t[4] textbox 'Beta'\n"
          "\t\t[5] textbox 'Gamma'\n\t\t[6] button 'Send'")


def test_a_failed_fill_gives_its_slot_to_the_next_draw(tmp_path):
    # Three undemonstrated text fields, equally near the clicked button; the fill model never
    # answers for 'Alpha' ([3]). Sampling: whichever field is drawn first, the rule keeps one
    # filled negative; ranked (today's behaviour), the first field's failed fill loses the slot.
    atomic_write_parquet(tmp_path / "trajectories.parquet",
                         steps_to_table([_step(0, "click('6')", FIELDS), _step(1, None, FIELDS)]))
    build_graphs(tmp_path, workers=1)

    def complete(request):
        bad = "target: fill on [3]" in request["messages"][-1]["content"]
        answer = {"role": "assistant", "content": "no" if bad else '{"value": "7"}'}
        return {"id": "x", "object": "chat.completion", "model": "scripted",
                "choices": [{"index": 0, "message": answer, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}
    server = serve_in_thread(complete, "scripted")
    llm = LLMConfig(base_url=server.base_url, model="scripted", cache_dir=str(tmp_path / "cache"))
    try:
        replaced = 0
        for seed in range(6):
            stats, rows = _mine(tmp_path, axes=("spatial",), max_per_rule=1, selection="sample", seed=seed, llm=llm)
            near = [c for c in rows if c["rule"] == "structurally_near"]
            assert len(near) == 1 and near[0]["neg_bid"] != "3" and near[0]["value_source"] == "llm"
            replaced += stats.extra["fill"]["replaced"]
            rule = stats.extra["rules"]["structurally_near"]
            assert rule["in"] == 1 + stats.extra["fill"]["replaced"] and rule["out"] == 1
        assert replaced >= 1
        stats, rows = _mine(tmp_path, axes=("spatial",), max_per_rule=1, selection="rank", llm=llm)
    finally:
        server.shutdown()
    assert rows == [] and stats.extra["rules"]["structurally_near"]["rejected"] == {"fill_invalid_not_json": 1}


def test_an_empty_pool_says_where_the_steps_went(tmp_path, capsys):
    # Every demonstrated action is go_back(): no rule has an element to contrast, the pool is
    # empty, and the command says why in one line (issue 41: no silent zeros).
    steps = [_step(i, "go_back()", url=f"https://shop.example.com/p{i}") for i in range(3)] + [_step(3, None)]
    atomic_write_parquet(tmp_path / "trajectories.parquet", steps_to_table(steps))
    build_graphs(tmp_path, workers=1)
    assert main(["--run", str(tmp_path), "--workers", "1", "--quiet", "--fill-base-url", NO_LLM.base_url,
                 "--fill-model", "none"]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "lost" in line]
    assert lines == ["proposals.mine: 0 candidates from 3 steps of successful trajectories; lost 3: 3 virtual_positive "
                     "(the demonstrated action targets no element, so no rule has one to contrast: go_back() x3)"]
    stats = json.loads((tmp_path / "stats.json").read_text())["proposals.mine"]
    assert stats["without_candidates"] == {"steps": {"virtual_positive": 3}, "virtual_positive_ops": {"go_back": 3}}


def test_a_full_pool_prints_no_loss_line(shop_run, capsys):
    assert main(["--run", str(shop_run), "--workers", "1", "--quiet", "--fill-base-url", NO_LLM.base_url,
                 "--fill-model", "none"]) == 0
    assert "lost" not in capsys.readouterr().out


def test_gmcp_ratio_drops_candidates_to_the_target_share(shop_run, capsys):
    # The No-Graph ablation at a matched GMCP share (Table 6): rows dropped (seeded), never
    # duplicated, each a reject with the reason gmcp_ratio, counted per rule.
    stats = mine(shop_run, MineConfig(no_graph=True, max_per_rule=0), NO_LLM, workers=1, show_progress=False)
    full = pq.read_table(shop_run / "candidates.parquet").to_pylist()
    share = sum(c["gmcp"] for c in full) / len(full)
    target = 0.5 if share > 0.6 else min(share + 0.3, 1.0)
    stats = mine(shop_run, MineConfig(no_graph=True, max_per_rule=0, pool_gmcp_ratio=target), NO_LLM, workers=1,
                 show_progress=False)
    rows = pq.read_table(shop_run / "candidates.parquet").to_pylist()
    assert abs(sum(c["gmcp"] for c in rows) / len(rows) - target) <= 0.02
    assert {c["pair_id"] for c in rows} < {c["pair_id"] for c in full}
    entry = stats.extra["gmcp_ratio"]
    assert entry["target"] == target and entry["share_before"] == share
    assert stats.rejected["gmcp_ratio"] == entry["dropped_gmcp"] + entry["dropped_other"] == len(full) - len(rows)
    assert sum(r["rejected"].get("gmcp_ratio", 0) for r in stats.extra["rules"].values()) == len(full) - len(rows)
    # A share that no subset reaches (no GMCP row at all) is the user's to change: GmcpRatioError,
    # which the command prints as one line with exit code 2.
    with pytest.raises(GmcpRatioError, match="--pool-gmcp-ratio 0.5: no subset of 0 GMCP and 5 other rows"):
        target_counts(0, 5, 0.5, flag="--pool-gmcp-ratio")


def test_gmcp_ratio_is_the_pool_ratio_on_the_mining_command(capsys):
    """``proposals.mine --gmcp-ratio R`` (the issue's and Table 6's name) sets the pool's share as
    ``--pool-gmcp-ratio`` does, with the same range check."""
    from proposals.mine import build_parser

    def ratio(*flags):
        return MineConfig.from_args(build_parser().parse_args(["--run", "x", *flags])).pool_gmcp_ratio

    assert ratio("--gmcp-ratio", "0.25") == ratio("--pool-gmcp-ratio", "0.25") == 0.25
    assert ratio() is None
    with pytest.raises(SystemExit):
        ratio("--gmcp-ratio", "1.5")
    assert "must be <= 1" in capsys.readouterr().err
