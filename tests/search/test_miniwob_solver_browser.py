"""``python -m search.miniwob --policy solver`` on real MiniWoB++ pages in Chromium: the scripted
solvers as the policy (no model) get the tasks' own reward 1, and the episodes become canonical
trajectories whose ``meta`` names the task and the seed that replay them."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from search.miniwob import main

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]
TASKS = ["click-checkboxes", "login-user", "choose-list"]


def test_solver_episodes_get_reward_1_and_carry_task_and_seed(tmp_path):
    out = tmp_path / "solver"
    assert main(["--prm", "none", "--policy", "solver", "--tasks", *TASKS, "--seeds", "0-1", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["tasks"] == 6 and s["terminations"] == {"task_done": 6}
    assert {k: v["success_rate"] for k, v in s["per_task"].items()} == {f"miniwob.{t}": 1.0 for t in TASKS}
    rows = pq.read_table(out / "trajectories.parquet").to_pylist()
    by_traj: dict[str, list] = {}
    for r in rows:
        by_traj.setdefault(r["traj_id"], []).append(r)
    assert len(by_traj) == 6
    for steps in by_traj.values():
        task, seed = steps[0]["task_id"].rsplit(".", 1)
        metas = [json.loads(r["meta"]) for r in steps]
        assert all(m["task"] == task and m["seed"] == int(seed) and m["policy"] == "solver" for m in metas)
        assert all(r["success"] is True for r in steps) and steps[-1]["action"] is None
        assert len(steps) >= 2          # at least one action, then the final observation
    login = sorted(by_traj[next(t for t in by_traj if "login-user.0" in t)], key=lambda r: r["step_idx"])
    assert [r["action"].split("(")[0] for r in login[:-1]] == ["fill", "fill", "click"]

