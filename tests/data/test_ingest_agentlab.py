"""Ingestion of the real AgentLab traces in ../shared/data/agentlab_workarena."""

import json
from collections import Counter

import pyarrow.parquet as pq

from data.actions import parse_action
from data.schema import TRAJECTORY_SCHEMA


def _rows(run):
    return pq.read_table(run / "trajectories.parquet").to_pylist()


def test_all_shared_runs_ingested(agentlab_run):
    rows = _rows(agentlab_run)
    stats = json.loads((agentlab_run / "stats.json").read_text())["ingest"]
    # 53 run folders; one crashed before its first observation, so 52 trajectories.
    assert len(rows) == 870
    assert stats["in"] == stats["out"] + sum(stats["rejected"].values())
    assert stats["rejected"] == {"no_observation": 2}
    assert stats["trajectories"] == 52
    # The data README says 35 successful runs; the summary files hold 34 with cum_reward 1.
    assert stats["successful_trajectories"] == 34
    assert sum(1 for r in rows if r["success"]) == 314
    rejects = [json.loads(l) for l in (agentlab_run / "rejects.jsonl").read_text().splitlines()]
    rejects = [r for r in rejects if r["stage"] == "ingest"]     # later stages share the run
    assert len(rejects) == 2 and all(r["source"].endswith(".pkl.gz") for r in rejects)


def test_schema_is_pinned(agentlab_run):
    assert pq.read_schema(agentlab_run / "trajectories.parquet").equals(TRAJECTORY_SCHEMA)


def test_fields_of_a_known_step(agentlab_run):
    rows = {(r["traj_id"], r["step_idx"]): r for r in _rows(agentlab_run)}
    traj = "2025-01-02_11-41-52_DemoAgentArgs_on_workarena.servicenow.order-standard-laptop_0"
    first = rows[(traj, 0)]
    assert first["action"] == "click('a252')"
    assert first["intent"].startswith('Go to the hardware store and order 10 "Standard Laptop"')
    assert first["site"] == "servicenow" and first["obs_format"] == "indented"
    assert first["url"].startswith("https://dev282647.service-now.com/now/nav/ui/classic/")
    assert first["observation"].startswith("RootWebArea 'Catalog | ServiceNow'")
    assert first["html"] and 'bid="' in first["html"]
    assert "Hardware" in first["thought"] and "```" not in first["thought"]
    assert first["task_id"] == "workarena.servicenow.order-standard-laptop_0"
    assert first["success"] is False
    last = max(k[1] for k in rows if k[0] == traj)
    assert rows[(traj, last)]["action"] is None


def test_actions_are_canonical_and_errors_come_from_next_step(agentlab_run):
    rows = _rows(agentlab_run)
    ops = Counter()
    for r in rows:
        if r["action"] is not None:
            assert parse_action(r["action"]).to_string() == r["action"]
            ops[r["action"].split("(")[0]] += 1
        else:
            assert r["action_error"] is None
    assert ops["click"] > 300 and ops["scroll"] > 100 and ops["send_msg_to_user"] > 0
    errored = [r for r in rows if r["action_error"]]
    assert errored, "some real actions failed (e.g. timeouts on clicks)"
    by_key = {(r["traj_id"], r["step_idx"]): r for r in rows}
    # The error is reported on the step whose action caused it, not on the next observation.
    for r in errored[:20]:
        assert (r["traj_id"], r["step_idx"] + 1) in by_key


def test_sites_are_per_observation(agentlab_run):
    rows = _rows(agentlab_run)
    sites_per_traj = {}
    for r in rows:
        sites_per_traj.setdefault(r["traj_id"], set()).add(r["site"])
    crossing = [t for t, s in sites_per_traj.items() if len(s) > 1]
    assert crossing, "some runs wandered to apple.com / bestbuy.com in other tabs"
    assert {"servicenow", "apple.com"} <= {s for ss in sites_per_traj.values() for s in ss}
