"""RunDir.states: the judged states s_t of a run, read in batches with only the keyed steps' text."""

import json

from data.rundir import RunDir, atomic_write_parquet
from data.schema import StepRecord, for_storage, steps_to_table


def _step(traj, i, meta="{}"):
    return StepRecord(source="agentlab", site="shop.example.com", task_id="t", traj_id=traj, step_idx=i,
                      intent=f"goal of {traj}", url=f"https://shop.example.com/{traj}/{i}",
                      observation=f"RootWebArea '{traj} {i}'", obs_format="indented", html=None,
                      action=f"click('{traj}{i}')", action_error=None, thought=None, success=True,
                      source_path=f"{traj}/step_{i}", meta=meta)


def test_states_carry_the_keyed_observation_and_the_earlier_actions(tmp_path):
    steps = [_step(t, i) for t in ("a", "b", "c") for i in range(3)]
    steps[3] = _step("b", 0, meta=json.dumps({"start_url": "https://shop.example.com/start"}))
    atomic_write_parquet(tmp_path / "trajectories.parquet", for_storage(steps_to_table(steps)))
    states = RunDir(tmp_path).states([("a", 2), ("b", 0), ("c", 1), ("zz", 0), ("a", 9)])
    assert sorted(states) == [("a", 2), ("b", 0), ("c", 1)]          # steps not in the file are left out
    a2 = states[("a", 2)]
    assert a2.axtree == "RootWebArea 'a 2'" and a2.intent == "goal of a" and a2.url.endswith("/a/2")
    assert a2.history == ["click('a0')", "click('a1')"] and a2.start_url.endswith("/a/0")
    assert states[("b", 0)].history == [] and states[("b", 0)].start_url == "https://shop.example.com/start"
    assert states[("c", 1)].axtree == "RootWebArea 'c 1'" and states[("c", 1)].history == ["click('c0')"]
    assert RunDir(tmp_path).states([]) == {}
