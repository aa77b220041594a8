import json

import pyarrow.parquet as pq

from conftest import BUNDLED
from data.ingest import ingest
from graph.axtree import parse_axtree


def test_webprm_samples(shared_data, tmp_path):
    stats = ingest("webprm", [shared_data / "webprm_collection_samples"], tmp_path)
    assert (stats.n_in, stats.n_out) == (3, 3)
    rows = {r["task_id"]: r for r in pq.read_table(tmp_path / "trajectories.parquet").to_pylist()}
    assert set(rows) == {"391", "950", "1175"}
    steam = rows["950"]
    assert steam["site"] == "store.steampowered.com" and steam["obs_format"] == "flat"
    assert steam["step_idx"] == 10 and steam["action"] == "go_back()"
    assert steam["traj_id"] == "webprm:950" and steam["html"] is None
    meta = json.loads(steam["meta"])
    assert meta["rejected"]["action"] == "click('4295')"   # kept for provenance, not lost
    tree = parse_axtree(steam["observation"], "flat")
    assert tree.tabs == [{"index": 0, "current": True, "title": "Assetto Corsa EVO on Steam"}]
    assert rows["391"]["site"] == "gamespot.com" and rows["1175"]["site"] == "ebay.com"


def test_bundled_sample_ingests_without_shared(tmp_path):
    stats = ingest("canonical", [BUNDLED / "agentlab_workarena.parquet"], tmp_path / "a")
    assert stats.n_out == stats.n_in > 50 and not stats.rejected
    rows = pq.read_table(tmp_path / "a" / "trajectories.parquet").to_pylist()
    assert all(r["success"] for r in rows)
    assert len({r["traj_id"] for r in rows}) >= 8
    assert sum(1 for r in rows if "order-ipad-pro" in r["task_id"] and r["step_idx"] == 0) >= 2
    assert (BUNDLED / "README.md").exists()
    size = sum(p.stat().st_size for p in BUNDLED.rglob("*") if p.is_file())
    assert size <= 5 * 1024 * 1024
    stats = ingest("webprm", [BUNDLED / "webprm"], tmp_path / "w")
    assert stats.n_out == 3
