"""The build-graphs flow under a real (temporary) Prefect API, with threads and with Dask."""

import json
import shutil

import pyarrow.parquet as pq
import pytest

from conftest import BUNDLED
from data.ingest import ingest


@pytest.fixture
def sample_run(tmp_path):
    ingest("canonical", [BUNDLED / "agentlab_workarena.parquet"], tmp_path / "run")
    return tmp_path / "run"


def _graph_nodes(run):
    return pq.read_table(run / "graphs" / "servicenow" / "nodes.parquet").to_pylist()


@pytest.mark.slow
def test_flow_builds_and_caches(prefect_harness, sample_run):
    from flows.build_graphs import build_graphs_flow
    from graph.build import build_graphs

    stats = build_graphs_flow(run=str(sample_run))
    assert stats["in"] == stats["out"] + sum(stats["rejected"].values())
    manifest = json.loads((sample_run / "graphs" / "manifest.json").read_text())
    assert manifest["sites"]["servicenow"]["element_nodes"] > 100
    flow_nodes = _graph_nodes(sample_run)
    # Same graph as the plain library call.
    plain = sample_run.parent / "plain"
    shutil.copytree(sample_run, plain, ignore=shutil.ignore_patterns("graphs"))
    build_graphs(plain, workers=1)
    assert _graph_nodes(plain) == flow_nodes
    # A second run with unchanged input reuses the cached site task: the files are not rewritten.
    mtime = (sample_run / "graphs" / "servicenow" / "nodes.parquet").stat().st_mtime_ns
    build_graphs_flow(run=str(sample_run))
    assert (sample_run / "graphs" / "servicenow" / "nodes.parquet").stat().st_mtime_ns == mtime
    # Deleted outputs are rebuilt, not served from the cache.
    shutil.rmtree(sample_run / "graphs" / "servicenow")
    build_graphs_flow(run=str(sample_run))
    assert _graph_nodes(sample_run) == flow_nodes
    # So are outputs rewritten behind the cache's back (another build, a manual edit).
    nodes_path = sample_run / "graphs" / "servicenow" / "nodes.parquet"
    pq.write_table(pq.read_table(nodes_path).slice(0, 3), nodes_path)
    build_graphs_flow(run=str(sample_run))
    assert _graph_nodes(sample_run) == flow_nodes


@pytest.mark.slow
def test_flow_on_local_dask_cluster(prefect_harness, sample_run):
    from flows.build_graphs import main

    assert main(["--run", str(sample_run), "--dask-local", "--dask-workers", "1"]) == 0
    assert (sample_run / "graphs" / "servicenow" / "edges.parquet").exists()


def test_site_task_logic_without_engine(sample_run):
    from data.rundir import RunDir
    from flows.build_graphs import build_site_graph
    from graph.build import BuildConfig, load_plan_columns, plan

    per_site, _ = plan(lambda: load_plan_columns(RunDir(sample_run)), False)
    (site, stats, rejects), written = build_site_graph.fn(str(sample_run), "servicenow", per_site["servicenow"],
                                                          "fp", BuildConfig())
    assert written and "nodes.parquet" in written
    assert site == "servicenow" and stats["observations"] == per_site["servicenow"]["rows"]
    assert (sample_run / "graphs" / "servicenow" / "nodes.parquet").exists()


def test_deployments_are_declared():
    from flows.serve import deployments

    names = {(d.flow_name, d.name) for d in deployments()}
    assert {("build-graphs", "default"), ("propose-negatives", "default"), ("verify-pairs", "default"),
            ("synthesize", "default"), ("train-prm", "default"), ("evaluate-prm", "default"),
            ("search-webarena", "default"), ("search-mag", "default")} <= names


@pytest.mark.slow
def test_propose_negatives_flow(prefect_harness, sample_run):
    from flows.build_graphs import build_graphs_flow
    from flows.propose_negatives import propose_negatives_flow
    from proposals.mine import MineConfig

    build_graphs_flow(run=str(sample_run))
    stats = propose_negatives_flow(run=str(sample_run), config=MineConfig(sample_size=30, axes=("temporal",)))
    assert stats["out"] > 0 and stats["in"] == stats["out"] + sum(stats["rejected"].values())
    rows = pq.read_table(sample_run / "candidates.parquet").to_pylist()
    assert sum(r["sampled"] for r in rows) == min(30, len(rows))
    assert {r["axis"] for r in rows} == {"temporal"}
