"""The ``search-miniwob`` flow as a deployment calls it (the config as JSON-like parameters) with
``workers=2``: its episodes run as Prefect tasks in the worker processes of a local Dask cluster
(not in this process), on real MiniWoB++ pages, and the run folder is the same as a sequential run's."""

import json
import os
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from miniwob_scripts import policy
from scripted_llm import scripted_server

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def test_miniwob_flow_runs_episodes_on_dask_workers(prefect_harness, tmp_path):
    from flows.search import search_miniwob_flow

    server = scripted_server(policy("right"))
    out = tmp_path / "flow"
    try:
        summary = search_miniwob_flow({
            "prm": "none", "policy": "scripted", "tasks": ["click-button"], "seeds": "0-1", "max_steps": 3,
            "workers": 2, "out": str(out), "policy_llm": {"base_url": server.base_url, "no_cache": True,
                                                          "api_key_env": "SURFPRM_TEST_KEY_UNSET"}})
    finally:
        server.shutdown()
    assert summary["macro"]["success_rate"] == 1.0 and summary["tasks"] == 2
    results = [json.loads((out / "tasks" / f"click-button.{s}.jsonl").read_text().splitlines()[-1]) for s in range(2)]
    assert [r["reward"] for r in results] == [1.0, 1.0]
    here = f"{socket.gethostname()}:{os.getpid()}"
    workers = {r["worker"] for r in results}
    assert here not in workers and 1 <= len(workers) <= 2         # in the cluster's processes
    table = pq.read_table(out / "trajectories.parquet")
    assert len(set(table.column("traj_id").to_pylist())) == 2
