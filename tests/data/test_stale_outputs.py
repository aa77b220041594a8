"""Stages know what their inputs were (issue 18): re-ingesting over a used run directory
removes every downstream output and says so; a stage refuses inputs written from a different
upstream run; an unwritable run directory fails before the work; a ``kill -9`` leaves no
orphan temp file behind for long."""

import json
import shutil
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from conftest import BUNDLED, ROOT
from data.ingest import ingest
from data.rundir import RunDir, RunDirNotWritable, StaleInputError, fingerprint
from dataset.export import export
from graph.build import build_graphs
from hostile_util import cli, experiment, no_traceback
from proposals.mine import MineConfig, mine
from scripted_teacher import ScriptedTeacher, llm_config, start
from teacher.verify import VerifyConfig, verify

SAMPLE = BUNDLED / "agentlab_workarena.parquet"
DOWNSTREAM = ["graphs", "candidates.parquet", "preferences.parquet", "discarded.parquet", "export", "audit",
              "report", "README.md"]


@pytest.fixture(scope="module")
def fill_llm(tmp_path_factory):
    """Fill values from a scripted OpenAI-protocol server (as tests/proposals do)."""
    from llm import LLMConfig
    from llm.serve import fixed_answer, serve_in_thread

    server = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "scripted")
    yield LLMConfig(base_url=server.base_url, model="scripted", cache_dir=str(tmp_path_factory.mktemp("fill")))
    server.shutdown()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, fill_llm):
    """The bundled sample through every stage: graphs, mining, a scripted teacher, the exports,
    the card and the report. Returns (run, teacher server, its llm config)."""
    run = tmp_path_factory.mktemp("full_run")
    ingest("canonical", [SAMPLE], run)
    build_graphs(run, workers=1)
    mine(run, MineConfig(sample_size=4, seed=42), fill_llm, workers=1)
    sampled = [c for c in pq.read_table(run / "candidates.parquet").to_pylist() if c["sampled"]]
    teacher = ScriptedTeacher(sampled)
    server = start(teacher)
    cfg = llm_config(server, tmp_path_factory.mktemp("teacher_cache"))
    verify(run, VerifyConfig(k=2), cfg, progress=False)
    export(run, "trl")
    export(run, "webprmbench", card=True)
    yield run, cfg
    server.shutdown()


def _copy(run, dst):
    shutil.copytree(run, dst)
    return dst


def test_every_stage_records_its_input_fingerprints(full_run):
    run, _ = full_run
    stats = json.loads((run / "stats.json").read_text())
    traj = fingerprint(run / "trajectories.parquet")
    assert stats["ingest"]["fingerprints"]["outputs"] == {"trajectories.parquet": traj}
    assert stats["graph.build"]["fingerprints"]["inputs"] == {"trajectories.parquet": traj}
    assert stats["graph.build"]["fingerprints"]["outputs"] == {"graphs": fingerprint(run / "graphs")}
    assert stats["proposals.mine"]["fingerprints"]["inputs"] == {"trajectories.parquet": traj,
                                                                  "graphs": fingerprint(run / "graphs")}
    assert stats["teacher.verify"]["fingerprints"]["inputs"] == {
        "candidates.parquet": fingerprint(run / "candidates.parquet"), "trajectories.parquet": traj}
    assert stats["data.export.trl"]["fingerprints"]["inputs"]["preferences.parquet"] == \
        fingerprint(run / "preferences.parquet")


def test_reingest_clears_every_downstream_output_and_says_so(full_run, tmp_path):
    run = _copy(full_run[0], tmp_path / "run")
    for rel in DOWNSTREAM:
        assert (run / rel).exists(), rel
    assert any(json.loads(ln)["stage"] != "ingest" for ln in (run / "rejects.jsonl").read_text().splitlines())
    (run / "notes.txt").write_text("mine")          # not a stage output: kept

    proc = cli("data.ingest", "--source", "canonical", "--input", str(SAMPLE), "--out", str(run))
    no_traceback(proc)
    assert proc.returncode == 0
    assert "re-ingesting over a used run directory: removed" in proc.stderr
    for rel in DOWNSTREAM:
        assert not (run / rel).exists(), rel
        assert rel in proc.stderr
    stats = json.loads((run / "stats.json").read_text())
    assert list(stats) == ["ingest"]
    assert "stats.json:teacher.verify" in stats["ingest"]["cleared"]
    assert {json.loads(ln)["stage"] for ln in (run / "rejects.jsonl").read_text().splitlines()} <= {"ingest"}
    assert (run / "notes.txt").read_text() == "mine"

    # The later stages answer in one line, not with a StopIteration or the old pairs.
    for module, missing in (("teacher.verify", "candidates.parquet"), ("dataset.export", "preferences.parquet")):
        args = ["--format", "trl"] if module == "dataset.export" else ["--base-url", "http://127.0.0.1:9/v1"]
        proc = cli(module, "--run", str(run), *args)
        no_traceback(proc)
        assert proc.returncode == 2 and missing in proc.stderr


def test_rerun_of_the_pipeline_after_reingest_works(full_run, tmp_path, fill_llm):
    run = _copy(full_run[0], tmp_path / "run")
    before = (run / "preferences.parquet").read_bytes()
    ingest("canonical", [SAMPLE], run)
    build_graphs(run, workers=1)
    mine(run, MineConfig(sample_size=4, seed=42), fill_llm, workers=1)
    verify(run, VerifyConfig(k=2), full_run[1], progress=False)      # the teacher's cache serves it
    export(run, "trl", card=False)
    assert (run / "preferences.parquet").read_bytes() == before


def test_stage_refuses_inputs_from_another_upstream_run(full_run, tmp_path, fill_llm):
    run = _copy(full_run[0], tmp_path / "run")
    # Rebuilding the graphs with other settings makes the mined candidates stale.
    build_graphs(run, include_failed=True, workers=1)
    stale = "candidates.parquet was written by proposals.mine from a different graphs"
    with pytest.raises(StaleInputError, match=stale):
        verify(run, VerifyConfig(k=2), full_run[1], progress=False)
    proc = cli("teacher.verify", "--run", str(run), "--base-url", "http://127.0.0.1:9/v1")
    no_traceback(proc)
    assert proc.returncode == 2 and "rerun `python -m proposals.mine`" in proc.stderr
    # Mining again (another sample) makes the kept preferences stale for the export; an identical
    # pool would not (the fingerprints are of the bytes).
    mine(run, MineConfig(sample_size=4, seed=7), fill_llm, workers=1)
    with pytest.raises(StaleInputError, match="preferences.parquet was written by teacher.verify"):
        export(run, "trl")
    proc = cli("dataset.export", "--run", str(run), "--format", "webprmbench")
    no_traceback(proc)
    assert proc.returncode == 2 and "different candidates.parquet" in proc.stderr


def test_replaced_trajectories_are_refused(full_run, tmp_path):
    run = _copy(full_run[0], tmp_path / "run")
    other = tmp_path / "other"
    experiment(tmp_path / "in")
    ingest("agentlab", [tmp_path / "in"], other)
    shutil.copy(other / "trajectories.parquet", run / "trajectories.parquet")    # by hand, no ingest
    with pytest.raises(StaleInputError, match="is not the file ingest wrote"):
        build_graphs(run, workers=1)
    proc = cli("graph.build", "--run", str(run), "--workers", "1")
    no_traceback(proc)
    assert proc.returncode == 2 and "rerun `python -m data.ingest`" in proc.stderr


def test_unwritable_run_directory_fails_before_the_work(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    import data.ingest as ingest_mod

    def never(*a, **k):
        raise AssertionError("read the inputs before checking the output")
    monkeypatch.setitem(ingest_mod.READERS, "canonical", never)
    with pytest.raises(RunDirNotWritable, match="cannot write to"):
        ingest("canonical", [SAMPLE], blocker / "run")
    proc = cli("data.ingest", "--source", "canonical", "--input", str(SAMPLE), "--out", str(blocker / "run"))
    no_traceback(proc)
    assert proc.returncode == 2 and "cannot write to" in proc.stderr
    with pytest.raises(RunDirNotWritable):
        RunDir(blocker / "run").check_inputs("graph.build")


_KILLED_INGEST = """
import os, signal, sys
import pyarrow.parquet as pq
import data.rundir as rundir
class WriteThenDie(pq.ParquetWriter):
    def close(self):
        super().close()               # the temp file is complete, the rename never happens
        os.kill(os.getpid(), signal.SIGKILL)
rundir.pq.ParquetWriter = WriteThenDie
from data.ingest import main
main(sys.argv[1:])
"""


def test_kill_9_orphan_temp_file_is_cleaned(tmp_path):
    run = tmp_path / "run"
    ingest("canonical", [SAMPLE], run)
    good = (run / "trajectories.parquet").read_bytes()
    proc = subprocess.run([sys.executable, "-c", _KILLED_INGEST, "--source", "canonical", "--input", str(SAMPLE),
                           "--out", str(run)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    orphans = list(run.glob(".trajectories.parquet.*.tmp"))
    assert len(orphans) == 1
    assert (run / "trajectories.parquet").read_bytes() == good      # the old file is whole
    stray = run / "graphs" / "site" / ".nodes.parquet.abc123.tmp"   # one a killed graph.build left
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"partial")
    ingest("canonical", [SAMPLE], run)
    assert not list(run.rglob("*.tmp"))
    assert pq.read_table(run / "trajectories.parquet").num_rows == 84


def test_stage_start_removes_only_its_own_orphans(tmp_path):
    run = tmp_path / "run"
    ingest("canonical", [SAMPLE], run)
    mine_tmp = run / ".candidates.parquet.x1y2z3.tmp"
    graph_tmp = run / "graphs" / "a" / ".edges.parquet.q9w8e7.tmp"
    graph_tmp.parent.mkdir(parents=True)
    for p in (mine_tmp, graph_tmp):
        p.write_bytes(b"partial")
    RunDir(run).check_inputs("graph.build", run / "trajectories.parquet")
    assert not graph_tmp.exists() and mine_tmp.exists()


def test_torn_bookkeeping_files(tmp_path):
    run = tmp_path / "run"
    ingest("canonical", [SAMPLE], run)
    (run / "rejects.jsonl").write_text('{"stage": "graph.build", "reason": "x"}\n{"stage": "ingest", "rea\n')
    (run / "stats.json").write_text('{"ingest": {"in": 8')
    proc = cli("graph.build", "--run", str(run), "--workers", "1")
    no_traceback(proc)
    assert proc.returncode == 2 and "stats.json is unreadable" in proc.stderr
    proc = cli("data.ingest", "--source", "canonical", "--input", str(SAMPLE), "--out", str(run))   # repairs it
    no_traceback(proc)
    assert proc.returncode == 0 and "stats.json (unreadable)" in proc.stderr
    assert list(json.loads((run / "stats.json").read_text())) == ["ingest"]
    assert (run / "rejects.jsonl").read_text() == ""


def test_ingest_into_a_folder_that_is_no_run_directory_removes_nothing(tmp_path):
    out = tmp_path / "project"
    (out / "report").mkdir(parents=True)
    (out / "README.md").write_text("---\ntags:\n- surfprm\n---\nmy notes")
    ingest("canonical", [SAMPLE], out)
    assert (out / "report").is_dir() and (out / "README.md").exists()


# -- issue 24 item 1: a stage lock, and no output without a recorded producer ----------------------
_BLOCKED_BUILD = """
import pathlib, sys, time
import graph.build as build
ready, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
real = build.finalize
def blocked(*a, **k):                 # the sites are written; the manifest and the entry not yet
    ready.write_text("ready")
    while not go.exists():
        time.sleep(0.05)
    return real(*a, **k)
build.finalize = blocked
sys.exit(build.main(sys.argv[3:]))
"""


def _blocked_build(tmp_path, run, *args):
    ready, go = tmp_path / "ready", tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", _BLOCKED_BUILD, str(ready), str(go), "--run", str(run),
                             "--workers", "1", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    for _ in range(1200):
        if ready.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert ready.exists(), proc.communicate()
    return proc, go


def test_two_concurrent_builds_do_not_mix_outputs(tmp_path):
    run = tmp_path / "run"
    ingest("canonical", [SAMPLE], run)
    build_graphs(run, workers=1)
    first, go = _blocked_build(tmp_path, run, "--include-failed")
    try:
        second = cli("graph.build", "--run", str(run), "--workers", "1")     # the default build
        no_traceback(second)
        assert second.returncode == 2, second.stdout
        [line] = second.stderr.strip().splitlines()
        assert "graphs is in use by another stage (graph.build (pid" in line and "does not wait" in line
        # A re-ingest (the repro) and a miner are refused the same way while it runs.
        again = cli("data.ingest", "--source", "canonical", "--input", str(SAMPLE), "--out", str(run))
        no_traceback(again)
        assert again.returncode == 2 and "in use by another stage" in again.stderr
        miner = cli("proposals.mine", "--run", str(run), "--sample-size", "1")      # reads the graphs
        assert miner.returncode == 2 and "graphs is in use by another stage" in miner.stderr
    finally:
        go.write_text("go")
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    manifest = json.loads((run / "graphs" / "manifest.json").read_text())
    stats = json.loads((run / "stats.json").read_text())
    assert manifest["include_failed"] is True and stats["graph.build"]["in"] == 84
    assert stats["graph.build"]["fingerprints"]["outputs"]["graphs"] == fingerprint(run / "graphs")
    assert RunDir(run).check_inputs("proposals.mine", run / "trajectories.parquet", run / "graphs")
    # Once it has finished, the lock is free again.
    build_graphs(run, workers=1)
    assert json.loads((run / "graphs" / "manifest.json").read_text())["include_failed"] is False


def test_an_output_without_a_recorded_producer_is_refused(full_run, tmp_path):
    run = _copy(full_run[0], tmp_path / "run")
    stats = json.loads((run / "stats.json").read_text())
    del stats["graph.build"]                      # graphs/ whose entry a re-ingest removed mid-build
    (run / "stats.json").write_text(json.dumps(stats))
    with pytest.raises(StaleInputError, match="graphs has no recorded producer"):
        RunDir(run).check_inputs("proposals.mine", run / "trajectories.parquet", run / "graphs")
    proc = cli("proposals.mine", "--run", str(run), "--sample-size", "1")
    no_traceback(proc)
    assert proc.returncode == 2 and "no recorded producer" in proc.stderr and "python -m graph.build" in proc.stderr
    # proposals.audit stays a reader: it never refuses a file as stale.
    proc = cli("proposals.audit", "--run", str(run), "--json")
    no_traceback(proc)
    assert "no recorded producer" not in proc.stderr and json.loads(proc.stdout)["pairs"] > 0
    # A failed stage leaves no lock behind for the next one in this process.
    with pytest.raises(StaleInputError):
        RunDir(run).check_inputs("proposals.mine", run / "graphs")
    build_graphs(run, workers=1)                  # records a producer again
    assert RunDir(run).check_inputs("proposals.mine", run / "trajectories.parquet", run / "graphs")
