"""Today's AgentLab traces (issue 23): GenericAgent runs of AgentLab 0.3+ (``AgentInfo``, the
prompt's ``Discussion`` and messages, bare action strings, numpy 1 and numpy 2 array paths), the
step layouts of the released BrowserGym 0.10-0.14 / AgentLab 0.3-0.4 (fixtures written with those
packages, tests/data/fixtures/agentlab_layouts/make_fixtures.py), and MiniWoB++ pages as one site."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import write_step_pickle
from data.actions import parse_action
from data.ingest import ingest

FIXTURES = Path(__file__).parent / "fixtures" / "agentlab_layouts"
LAYOUTS = sorted(p for p in FIXTURES.iterdir() if p.is_dir())
GENERIC = "agentlab_genericagent_miniwob"


def _rows(run):
    return sorted(pq.read_table(run / "trajectories.parquet").to_pylist(), key=lambda r: (r["traj_id"], r["step_idx"]))


def _stats(run):
    return json.loads((run / "stats.json").read_text())["ingest"]


@pytest.fixture(scope="module")
def generic_run(shared_data, tmp_path_factory):
    if not (shared_data / GENERIC).is_dir():
        pytest.skip(f"{GENERIC} not in {shared_data}")
    run = tmp_path_factory.mktemp("generic")
    ingest("agentlab", [shared_data / GENERIC], run, quiet=True)
    return run


def test_generic_agent_runs_give_a_row_per_observation(generic_run, shared_data):
    n_obs = sum(1 for _ in (shared_data / GENERIC).glob("*/step_*.pkl.gz"))
    s = _stats(generic_run)
    assert s["in"] == s["out"] == n_obs == 4 and s["rejected"] == {}       # 0 unexpected_class
    rows = _rows(generic_run)
    acting = [r for r in rows if r["action"] is not None]
    assert len(acting) == 2 and all(r["action"] == "click('20')" for r in acting)
    # the thought is agent_info.think (GenericAgent's reasoning), not the action text
    assert all(r["thought"].startswith("The dialog box is currently open") for r in acting)
    assert all(r["action"] is None and r["thought"] is None for r in rows if r not in acting)
    assert {r["site"] for r in rows} == {"miniwob"} and all(r["success"] for r in rows)
    assert all(r["url"].endswith("/miniwob/click-dialog.html") for r in rows)
    assert {r["intent"] for r in rows} == {'Close the dialog box by clicking the "x".'}
    assert {json.loads(r["meta"])["model"] for r in acting} == {"gpt-4o-mini"}     # AgentInfo.extra_info


def test_generic_agent_runs_build_a_miniwob_graph_and_mine(generic_run, tmp_path):
    import shutil

    from graph.build import build_graphs
    from llm import LLMConfig
    from proposals.mine import MineConfig, mine

    run = tmp_path / "run"
    shutil.copytree(generic_run, run)
    build_graphs(run, workers=1)
    assert sorted(p.name for p in (run / "graphs").iterdir() if p.is_dir()) == ["miniwob"]
    nodes = pq.read_table(run / "graphs" / "miniwob" / "nodes.parquet").to_pylist()
    assert {n["url"] for n in nodes} == {"/click-dialog"}        # no one's home directory in the identity
    close = [n for n in nodes if n["role"] == "button" and n["name"] == "Close"]
    assert len(close) == 1 and close[0]["n_traj"] == 2          # both runs' Close button: one node
    mine(run, MineConfig(sample_size=10, seed=1), LLMConfig(base_url="http://127.0.0.1:9/v1", model="none",
                                                       cache_dir=str(tmp_path / "llm")), workers=1)
    s = json.loads((run / "stats.json").read_text())["proposals.mine"]
    assert s["steps"]["in"] == 2 and s["steps"]["in"] == s["steps"]["out"] + sum(s["steps"]["rejected"].values())
    assert (run / "candidates.parquet").exists()


@pytest.mark.parametrize("layout", LAYOUTS, ids=[p.name.split("_on_")[0] for p in LAYOUTS])
def test_released_layouts_read(layout, tmp_path):
    """One fixture per released BrowserGym (and AgentLab) version, written with that version."""
    versions = dict(line.split("==") for line in (layout / "package_versions.txt").read_text().split())
    stats = ingest("agentlab", [layout], tmp_path / "run", quiet=True)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (2, 2, {})
    first, last = _rows(tmp_path / "run")
    assert first["action"] == "click('20')" and last["action"] is None
    if "agentlab" in versions:          # GenericAgent: bare action, think
        assert first["thought"].startswith("The dialog is open")
    else:                               # DemoAgent: fenced block, the text around it
        assert first["thought"] == "I will close the dialog."
    assert first["site"] == "miniwob" and first["intent"].startswith("Close the dialog")
    assert json.loads(first["meta"])["cum_reward"] == 1.0


def test_the_layouts_cover_numpy_1_and_2_and_agentlab_04():
    names = " ".join(p.name for p in LAYOUTS)
    assert "numpy1" in names and "numpy2" in names and "agentlab0.4" in names and "bg0.14" in names


def _exp(root: Path, states: list[dict], **kw) -> Path:
    d = root / "2025-01-01_00-00-00_GenericAgent_on_miniwob.click-test_0"
    d.mkdir(parents=True)
    (d / "summary_info.json").write_text(json.dumps({"cum_reward": 1}))
    for i, st in enumerate(states):
        write_step_pickle(d / f"step_{i}.pkl.gz", st, **kw)
    return d


def _state(action="click('13')", **change):
    st = {"step": 0, "action": action, "agent_info": {},
          "obs": {"chat_messages": [{"role": "user", "message": "Click the button"}],
                  "open_pages_urls": ["http://localhost:8000/miniwob/click-test.html"], "active_page_index": [0],
                  "axtree_txt": "RootWebArea 'Click Test'\n\t[13] button 'Click Me!'", "last_action_error": ""}}
    st.update(change)
    return st


def test_unknown_newer_layouts_name_the_missing_field(tmp_path):
    no_action = {k: v for k, v in _state().items() if k != "action"}
    _exp(tmp_path / "in", [no_action, _state(action={"name": "click", "bid": "13"}), _state(action=None)])
    stats = ingest("agentlab", [tmp_path / "in"], tmp_path / "run", quiet=True)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (3, 1, {"missing_field": 2})
    details = sorted(json.loads(l)["detail"] for l in (tmp_path / "run" / "rejects.jsonl").read_text().splitlines())
    assert "StepInfo has no field 'action'" in details[0] and "its fields: agent_info, obs, step" in details[0]
    assert details[1] == "action is dict, not the agent's text"


def test_a_pickled_class_of_another_name_is_still_refused(tmp_path):
    _exp(tmp_path / "in", [_state()], module="browsergym.experiments.loop", name="StepInfoV2")
    stats = ingest("agentlab", [tmp_path / "in"], tmp_path / "run", quiet=True)
    assert dict(stats.rejected) == {"unexpected_class": 1}


def test_served_miniwob_pages_are_the_same_site_and_path(tmp_path):
    from graph.build import build_graphs

    _exp(tmp_path / "in", [_state(), _state(action=None)])
    ingest("agentlab", [tmp_path / "in"], tmp_path / "run", quiet=True)
    rows = _rows(tmp_path / "run")
    assert {r["site"] for r in rows} == {"miniwob"}
    build_graphs(tmp_path / "run", workers=1)
    nodes = pq.read_table(tmp_path / "run" / "graphs" / "miniwob" / "nodes.parquet").to_pylist()
    assert {n["url"] for n in nodes} == {"/click-test"}
    assert parse_action(rows[0]["action"]).bid == "13"


CHROMIUM = Path("/usr/lib/chromium/chromium")


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")
def test_search_episodes_and_agentlab_runs_share_graph_nodes(generic_run, tmp_path):
    """A real search.miniwob episode of click-dialog (Chromium, the miniwob wheel's pages, a
    scripted policy that clicks Close) and the AgentLab GenericAgent runs of the same task, made on
    another machine: one ``miniwob`` graph, whose Close button is one node seen in all three."""
    import re

    from graph.build import build_graphs
    from llm.serve import serve_in_thread
    from search.miniwob import main as miniwob_main

    def complete(payload):
        tree = re.search(r"# Accessibility tree\n(.*?)(?:\n\n# |\Z)", payload["messages"][-1]["content"], re.S).group(1)
        close = re.search(r"\[(\w+)\] button 'Close'", tree).group(1)
        text = f"Close it.\n```\nclick('{close}')\n```"
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                            for i in range(payload.get("n", 1))],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    server = serve_in_thread(complete, "scripted")
    out = tmp_path / "search"
    try:
        rc = miniwob_main(["--policy", "scripted", "--policy-base-url", server.base_url, "--policy-no-cache",
                           "--policy-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--prm", "none", "--out", str(out),
                           "--max-steps", "2", "--tasks", "click-dialog", "--seeds", "0"])
    finally:
        server.shutdown()
    assert rc == 0 and json.loads((out / "summary.json").read_text())["macro"]["success_rate"] == 1.0
    run = tmp_path / "run"
    stats = ingest("canonical", [generic_run / "trajectories.parquet", out / "trajectories.parquet"], run, quiet=True)
    assert stats.n_out == stats.n_in and not stats.rejected
    rows = _rows(run)
    assert {r["site"] for r in rows} == {"miniwob"} and {r["source"] for r in rows} == {"agentlab", "search"}
    assert any("site-packages/miniwob" in r["url"] for r in rows)     # the wheel's path, the other machine's home
    assert any("/home/" in r["url"] for r in rows)
    build_graphs(run, workers=1)
    nodes = pq.read_table(run / "graphs" / "miniwob" / "nodes.parquet").to_pylist()
    assert {n["url"] for n in nodes} == {"/click-dialog"}
    (close,) = [n for n in nodes if n["role"] == "button" and n["name"] == "Close"]
    assert close["n_traj"] == 3 and close["n_demos"] == 3            # two AgentLab runs and the episode
