"""Flows are the CLIs: a flow run writes what the stage's command writes (``stats.json`` with its
input fingerprints, ``rejects.jsonl`` in the same order, also on a rerun after later stages), fails
with the command's one ``error:`` line and exit code instead of a traceback, and posts its summary
as a markdown artifact."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pyarrow.parquet as pq
import pytest

from conftest import BUNDLED
from data.ingest import ingest
from data.rundir import Reject, RunDir, StageStats
from prefect_artifacts import flow_run_artifacts


@pytest.fixture
def run_with_rejects(tmp_path):
    """The bundled sample with two trajectories marked unsuccessful, so graph.build rejects rows."""
    table = pq.read_table(BUNDLED / "agentlab_workarena.parquet")
    failed = sorted(set(table.column("traj_id").to_pylist()))[:2]
    rows = [{**r, "success": False} if r["traj_id"] in failed else r for r in table.to_pylist()]
    src = tmp_path / "sample.parquet"
    pq.write_table(table.from_pylist(rows, schema=table.schema), src)
    ingest("canonical", [src], tmp_path / "base", quiet=True)
    return tmp_path / "base"


@pytest.fixture(scope="module")
def fill_flags(tmp_path_factory):
    """Fill values from a scripted OpenAI-protocol server: these tests compare the flow with the
    CLI, and the embedded model writing the sample's values (~100 s on a fresh clone, where the
    LLM cache is empty) would test nothing more."""
    from llm.serve import fixed_answer, serve_in_thread

    server = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "scripted-fill")
    cache = tmp_path_factory.mktemp("fill_cache")
    yield ["--fill-base-url", server.base_url, "--fill-model", "scripted-fill", "--fill-cache-dir", str(cache)]
    server.shutdown()


def _stats(run) -> dict:
    """stats.json with the run directory's path taken out (the two runs live in two folders)."""
    return json.loads((run / "stats.json").read_text().replace(str(run), "RUN"))


def _later_stage(run) -> None:
    """What a later stage leaves behind: its own stats entry and rejects lines."""
    stats = StageStats("proposals.mine", n_in=1, n_out=0)
    stats.rejected["demo"] += 1
    RunDir(run).write_stage(stats, [Reject("proposals.mine", "demo", "candidates.parquet", "x")])


@pytest.mark.slow      # a Prefect API (prefect_harness)
def test_build_graphs_flow_writes_what_the_cli_writes(prefect_harness, run_with_rejects, fill_flags, tmp_path):
    from flows.build_graphs import build_graphs_flow
    from flows.build_graphs import main as flow_main
    from graph.build import main as cli_main

    cli, fl = tmp_path / "cli", tmp_path / "flow"
    shutil.copytree(run_with_rejects, cli)
    shutil.copytree(run_with_rejects, fl)
    assert cli_main(["--run", str(cli), "--workers", "1"]) == 0
    assert flow_main(["--run", str(fl)]) == 0
    stats = _stats(cli)
    ingested = stats["ingest"]["fingerprints"]["outputs"]["trajectories.parquet"]
    assert stats["graph.build"]["fingerprints"]["inputs"] == {"trajectories.parquet": ingested}
    assert stats["graph.build"]["rejected"]["unsuccessful_trajectory"] > 0
    assert _stats(fl) == stats
    assert (fl / "rejects.jsonl").read_bytes() == (cli / "rejects.jsonl").read_bytes()
    for rel in ("nodes.parquet", "edges.parquet", "steps.parquet"):
        site = next(p.name for p in (cli / "graphs").iterdir() if p.is_dir())
        assert pq.read_table(fl / "graphs" / site / rel).equals(pq.read_table(cli / "graphs" / site / rel))

    # A rerun after a later stage wrote its rejects: both keep the pipeline order of the lines.
    for run in (cli, fl):
        _later_stage(run)
    assert cli_main(["--run", str(cli), "--workers", "1"]) == 0
    state = build_graphs_flow(run=str(fl), return_state=True)
    lines = (cli / "rejects.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["stage"] == "proposals.mine"          # not moved behind graph.build's lines
    assert (fl / "rejects.jsonl").read_bytes() == (cli / "rejects.jsonl").read_bytes()
    assert _stats(fl) == _stats(cli)

    # propose-negatives calls proposals.mine as its CLI does: the same pool, stats and rejects
    # (times and the LLM cache's hits aside: the second run finds the fill values cached).
    from flows.propose_negatives import main as mine_flow_main
    from proposals.mine import main as mine_main

    assert mine_main(["--run", str(cli), "--sample-size", "8", "--workers", "1", "--quiet", *fill_flags]) == 0
    assert mine_flow_main(["--run", str(fl), "--sample-size", "8", *fill_flags]) == 0

    def without_times(stats):
        mined = {k: v for k, v in stats["proposals.mine"].items() if k not in ("seconds", "llm")}
        return {**stats, "proposals.mine": mined}

    assert without_times(_stats(fl)) == without_times(_stats(cli))
    assert pq.read_table(fl / "candidates.parquet").equals(pq.read_table(cli / "candidates.parquet"))
    assert (fl / "rejects.jsonl").read_bytes() == (cli / "rejects.jsonl").read_bytes()

    # The flow run's summary is a markdown artifact of this flow run (shown in the UI).
    art = flow_run_artifacts(state, ["build-graphs-summary"])["build-graphs-summary"]
    assert art.type == "markdown" and "[graph.build]" in art.data


@pytest.mark.slow      # a Prefect API (prefect_harness)
def test_flows_take_the_stages_settings(prefect_harness, run_with_rejects, fill_flags, tmp_path):
    """Settings other than the defaults reach the flow's stage as they reach the CLI: graph.build's
    --identity/--max-nodes/--include-failed (the manifest records them; too_large rejects) and
    proposals.mine's --near-hops/--max-per-rule/--prefer-same-op."""
    from flows.build_graphs import main as flow_main
    from flows.propose_negatives import main as mine_flow_main
    from graph.build import main as cli_main
    from proposals.mine import main as mine_main

    cli, fl = tmp_path / "cli", tmp_path / "flow"
    shutil.copytree(run_with_rejects, cli)
    shutil.copytree(run_with_rejects, fl)
    build = ["--identity", "ours", "--max-nodes", "200", "--include-failed"]
    assert cli_main(["--run", str(cli), "--workers", "1", *build]) == 0
    assert flow_main(["--run", str(fl), *build]) == 0
    stats = _stats(cli)["graph.build"]
    assert stats["rejected"].get("too_large", 0) > 0 and "unsuccessful_trajectory" not in stats["rejected"]
    manifest = json.loads((fl / "graphs" / "manifest.json").read_text())
    assert (manifest["identity"], manifest["max_nodes"]) == ("ours", 200)
    assert _stats(fl) == _stats(cli)
    assert (fl / "rejects.jsonl").read_bytes() == (cli / "rejects.jsonl").read_bytes()

    mine = ["--sample-size", "8", "--near-hops", "1", "--max-per-rule", "1", "--prefer-same-op", *fill_flags]
    assert mine_main(["--run", str(cli), "--workers", "1", "--quiet", *mine]) == 0
    assert mine_flow_main(["--run", str(fl), "--workers", "1", "--quiet", *mine]) == 0
    mined = {k: v for k, v in _stats(fl)["proposals.mine"].items() if k not in ("seconds", "llm")}
    assert mined == {k: v for k, v in _stats(cli)["proposals.mine"].items() if k not in ("seconds", "llm")}
    rows = pq.read_table(fl / "candidates.parquet").to_pylist()
    assert rows and max(Counter((r["traj_id"], r["step_idx"], r["rule"]) for r in rows).values()) == 1
    assert pq.read_table(fl / "candidates.parquet").equals(pq.read_table(cli / "candidates.parquet"))


@pytest.mark.slow
def test_flows_fail_with_the_clis_line_and_code(prefect_harness, tmp_path, capsys):
    """A missing run directory: one ``error:`` line and exit code 2 from the CLI and from the
    flow's command; the flow run ends Failed with that line as its message, and its log (what a
    worker shows) holds that line and no traceback."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    from flows.build_graphs import build_graphs_flow
    from flows.build_graphs import main as flow_main
    from flows.propose_negatives import main as mine_flow_main
    from graph.build import main as cli_main
    from proposals.mine import main as mine_main

    nope = str(tmp_path / "nope")
    capsys.readouterr()
    assert cli_main(["--run", nope]) == 2
    cli_err = capsys.readouterr().err
    assert cli_err.count("\n") == 1 and cli_err.startswith("error: ")
    assert flow_main(["--run", nope]) == 2
    assert capsys.readouterr().err.endswith(cli_err)            # the command's own last line
    state = build_graphs_flow(run=nope, return_state=True)
    assert state.is_failed() and state.message == cli_err.strip()
    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        logs = [log.message for log in client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id])))]
    assert any(cli_err.strip() in m for m in logs), logs
    assert not any("Traceback" in m for m in logs), logs

    assert mine_main(["--run", nope]) == 2
    cli_err = capsys.readouterr().err.splitlines()[-1]
    assert mine_flow_main(["--run", nope]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == cli_err and cli_err.startswith("error: ")


def test_a_refusal_is_a_failed_state_not_a_traceback():
    """The task wrapper's logic without the engine: a refused input is a returned Failed state
    with the CLI's line, which is not retried; an outage (pending work) is."""
    from flows.common import StageError, error_of, retry_unless_refused, stage_task

    @stage_task
    def refuses(path):
        raise FileNotFoundError(f"{path} not found: run `python -m data.ingest` first")

    state = refuses("runs/nope")
    assert state.is_failed() and state.message == "error: runs/nope not found: run `python -m data.ingest` first"
    assert error_of(state).code == 2 and not retry_unless_refused(None, None, state)

    @stage_task
    def pending():
        raise StageError("3 pairs pending", code=3)

    assert retry_unless_refused(None, None, pending())

    @stage_task
    def crashes():
        raise KeyError("a bug")

    with pytest.raises(KeyError):          # anything else keeps its traceback
        crashes()


def test_a_served_runs_refusal_is_not_logged_again_with_a_traceback():
    """A served flow run re-raises its final state after "Finished in state Failed('error: ...')";
    that engine record is dropped for a refusal and kept for anything else."""
    import logging
    import sys

    from flows.common import StageError

    def record(exc):
        try:
            raise exc
        except Exception:
            return logging.LogRecord("prefect.flow_runs", logging.ERROR, __file__, 1,
                                     "Engine execution exited with unexpected exception", (), sys.exc_info())

    logger = logging.getLogger("prefect.flow_runs")
    assert not logger.filter(record(StageError("runs/nope/trajectories.parquet not found")))
    assert logger.filter(record(KeyError("a bug")))
