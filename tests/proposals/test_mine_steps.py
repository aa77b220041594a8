"""Mining maps steps as the graph build did: it reads the build's step-to-node mapping (or, in
the No-Graph ablation, computes it with the build's own pass), skips the observations the build
rejects, counts every demonstrated step, and fails before the work on unreadable inputs or
unwritable outputs."""

import json
import subprocess
import sys
from collections import defaultdict

import pyarrow.parquet as pq
import pytest

from conftest import BUNDLED, ROOT
from data.ingest import ingest
from data.rundir import RunDir, RunDirError, RunDirNotWritable, atomic_write_parquet, fingerprint
from data.schema import StepRecord, steps_to_table
from graph.build import build_graphs
from graph.identity import NodeKind
from proposals.mine import MineConfig, Miner, load_rows, mine

OBS = ("RootWebArea 'Shop'\n\t[1] link 'Home'\n\t[2] button 'Buy'\n\t[3] button 'Buy later'\n"
       "\t[4] link 'Help'\n\t[5] button 'Buy now'")


def _step(traj, i, obs, action, error=None):
    return StepRecord(source="agentlab", site="shop.example.com", task_id="t", traj_id=traj, step_idx=i,
                      intent="buy", url=f"https://shop.example.com/p{i}", observation=obs, obs_format="indented",
                      html=None, action=action, action_error=error, thought=None, success=True,
                      source_path=f"{traj}/step_{i}", meta="{}")


@pytest.fixture
def dup_run(tmp_path):
    """Step 1's positive target (bid 2) appears twice on its page: the build rejects it."""
    steps = [_step("a", 0, OBS, "click('1')"),
             _step("a", 1, OBS + "\n\t[2] link 'Also two'", "click('2')"),
             _step("a", 2, OBS, "click('3')"),
             _step("a", 3, OBS, "click('9')"),                                 # target missing
             _step("a", 4, OBS, "click('4')", error="TimeoutError"),
             _step("a", 5, OBS, "click('5')"),
             _step("a", 6, OBS, None)]
    atomic_write_parquet(tmp_path / "trajectories.parquet", steps_to_table(steps))
    return tmp_path


@pytest.mark.parametrize("no_graph", [False, True])
def test_observations_the_build_rejects_are_not_mined(dup_run, no_graph):
    build = build_graphs(dup_run, workers=1)
    assert build.rejected["duplicate_bids"] == 1
    stats = mine(dup_run, MineConfig(no_graph=no_graph, axes=("spatial", "temporal")), workers=1)
    steps = stats.extra["steps"]
    assert steps == {"in": 6, "out": 3, "rejected": {"action_failed": 1, "duplicate_bids": 1,
                                                     "positive_not_in_observation": 1}}
    assert steps["in"] == steps["out"] + sum(steps["rejected"].values())
    assert stats.n_in == stats.n_out + sum(stats.rejected.values())
    cands = pq.read_table(dup_run / "candidates.parquet").to_pylist()
    assert cands and {c["step_idx"] for c in cands} <= {0, 2, 5}
    rejects = [json.loads(line) for line in (dup_run / "rejects.jsonl").read_text().splitlines()]
    mined = [r for r in rejects if r["stage"] == "proposals.mine" and "rule" not in r.get("key", {})]
    assert sorted((r["reason"], r["key"]["step_idx"]) for r in mined) == [
        ("action_failed", 4), ("duplicate_bids", 1), ("positive_not_in_observation", 3)]
    assert "bids repeated" in next(r["detail"] for r in mined if r["reason"] == "duplicate_bids")


def test_mapping_read_from_the_build_equals_the_no_graph_one(tmp_path):
    run = tmp_path / "run"
    ingest("canonical", [BUNDLED / "agentlab_workarena.parquet"], run)
    build_graphs(run, workers=1)
    rows = load_rows(RunDir(run))
    by_traj = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["traj_id"], r["step_idx"])):
        by_traj[r["traj_id"]].append(r)
    with_graph, without = Miner(RunDir(run), MineConfig()), Miner(RunDir(run), MineConfig(no_graph=True))
    from graph.passes import ObservationRejected, next_urls, observe

    compared = virtual = 0
    written = {(r["traj_id"], r["step_idx"]): r["node_id"]
               for r in pq.read_table(run / "graphs" / "servicenow" / "steps.parquet").to_pylist()}
    for traj, trows in by_traj.items():
        if not trows[0]["success"]:
            continue
        by_step, nxt = {r["step_idx"]: r for r in trows}, dict(zip((r["step_idx"] for r in trows), next_urls(trows)))

        def observation(i, by_step=by_step, nxt=nxt):
            try:
                return observe(by_step[i], by_step[i]["site"], nxt[i])
            except ObservationRejected as e:
                return e
        a, b = with_graph.step_mapping(trows, observation), without.step_mapping(trows, observation)
        assert a == b, traj
        assert {(traj, i): n for i, (n, _) in a.items()} == {k: v for k, v in written.items() if k[0] == traj}
        virtual += sum(kind is NodeKind.VIRTUAL for _, kind in a.values())
        compared += len(a)
    assert compared == len(written) > 50 and virtual > 0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and all(n in proc.stderr for n in needles), proc.stderr


@pytest.mark.parametrize("damage", ["truncated", "garbage", "no_columns"])
def test_corrupt_trajectories_fail_before_the_work(dup_run, damage):
    path = dup_run / "trajectories.parquet"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a parquet file" * 100)
    else:
        pq.write_table(pq.read_table(path).drop_columns(["observation"]), path)
    with pytest.raises(RunDirError, match="cannot read"):
        build_graphs(dup_run, workers=1)
    assert not (dup_run / "graphs").exists()
    _one_line_error(_cli("graph.build", "--run", str(dup_run)), "trajectories.parquet", "python -m data.ingest")
    _one_line_error(_cli("proposals.mine", "--run", str(dup_run), "--no-graph"), "trajectories.parquet")
    assert not (dup_run / "candidates.parquet").exists()


def test_corrupt_graph_table_fails_before_mining(dup_run):
    build_graphs(dup_run, workers=1)
    (dup_run / "graphs" / "shop.example.com" / "steps.parquet").write_bytes(b"garbage")
    # The fingerprints in stats.json already refuse a changed graph, and a graph with no recorded
    # producer (issue 24): when the entry records the corrupt file (edited by hand), the table is
    # still opened before the work.
    _one_line_error(_cli("proposals.mine", "--run", str(dup_run)), "graphs", "rerun `python -m graph.build`")
    stats = json.loads((dup_run / "stats.json").read_text())
    stats["graph.build"]["fingerprints"]["outputs"]["graphs"] = fingerprint(dup_run / "graphs")
    (dup_run / "stats.json").write_text(json.dumps(stats))
    _one_line_error(_cli("proposals.mine", "--run", str(dup_run)), "steps.parquet", "python -m graph.build")
    (dup_run / "stats.json").unlink()
    _one_line_error(_cli("proposals.mine", "--run", str(dup_run)), "graphs has no recorded producer")


def test_unwritable_outputs_fail_before_the_work(dup_run, monkeypatch):
    (dup_run / "graphs").write_text("a file where the graphs folder goes")
    import graph.build as build_mod

    def never(*a, **k):
        raise AssertionError("built before checking the outputs")
    monkeypatch.setattr(build_mod, "build_and_write_site", never)
    with pytest.raises(RunDirNotWritable, match="not a directory"):
        build_graphs(dup_run, workers=1)
    _one_line_error(_cli("graph.build", "--run", str(dup_run)), "cannot write to")

    (dup_run / "candidates.parquet").mkdir()
    with pytest.raises(RunDirNotWritable, match="is a directory"):
        mine(dup_run, MineConfig(no_graph=True), workers=1)
    _one_line_error(_cli("proposals.mine", "--run", str(dup_run), "--no-graph"), "cannot write to")
