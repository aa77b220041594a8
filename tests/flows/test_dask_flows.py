"""Mining and verification on a real local Dask cluster (worker processes, the real Prefect engine,
the real LLM client against scripted OpenAI-protocol servers): the propose-negatives flow's
per-chunk tasks and the verify-pairs flow's shards write the same bytes as the one-process CLIs,
fill values are asked once per distinct prompt across sites and not at all on a rerun (the LLM
cache), a shard that fails once (an outage) is retried without repeating a finished call, and a
task whose worker dies ends the flow at once."""

from __future__ import annotations

import json
import shutil
import threading

import pyarrow.parquet as pq
import pytest

from conftest import BUNDLED
from scripted_teacher import ScriptedTeacher, make_run, start

pytestmark = pytest.mark.slow        # a Prefect server, Dask worker processes (~1-2 min here)

SITES = 3


def _stage(run, stage: str) -> dict:
    """A stage's stats.json entry without its time."""
    entry = json.loads((run / "stats.json").read_text())[stage]
    entry.pop("seconds")
    return entry


def _rejects(run, stage: str) -> list[str]:
    return [line for line in (run / "rejects.jsonl").read_text().splitlines() if json.loads(line)["stage"] == stage]


@pytest.fixture(scope="module")
def sites_run(tmp_path_factory):
    """The bundled sample's successful trajectories copied onto three sites (trajectory ids
    interleave across the sites in sorted order), ingested and their graphs built: two identical
    run directories."""
    from bench.graphs import replicate
    from data.ingest import ingest
    from graph.build import build_graphs

    root = tmp_path_factory.mktemp("sites")
    replicate(BUNDLED / "agentlab_workarena.parquet", root / "pool", SITES)      # bench/graphs.py's copies
    ingest("canonical", [root / "pool" / "trajectories.parquet"], root / "cli", quiet=True)
    build_graphs(root / "cli", workers=1)
    shutil.copytree(root / "cli", root / "flow")
    return root


@pytest.fixture(scope="module")
def scheduler(prefect_harness):
    """One local Dask cluster (two worker processes) for the module's flows: starting one costs
    seconds, and ``--dask-local`` itself is test_build_graphs_flow's."""
    from flows.common import DaskConfig, dask_scheduler

    with dask_scheduler(DaskConfig(dask_local=True, dask_workers=2)) as address:
        yield address


def test_the_memory_limit_reaches_the_local_cluster(monkeypatch):
    """--dask-memory-limit is each worker's limit of the --dask-local cluster (and no limit is Dask's
    default). The module's own cluster keeps Dask's default: with an explicit limit the mining test
    waited forever inside a whole clean-clone suite (not reproduced in isolation)."""
    import distributed

    from flows.common import DaskConfig, dask_scheduler

    made = []

    class Recording:
        def __init__(self, **kwargs):
            made.append(kwargs)
            self.scheduler_address = "tcp://127.0.0.1:1"

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(distributed, "LocalCluster", Recording)
    for limit in ("1GB", None):
        with dask_scheduler(DaskConfig(dask_local=True, dask_workers=2, dask_memory_limit=limit)) as address:
            assert address == "tcp://127.0.0.1:1"
    assert made[0]["memory_limit"] == "1GB" and made[0]["n_workers"] == 2 and "memory_limit" not in made[1]


def test_memory_limit_flag_is_checked_where_it_is_parsed(capsys):
    from flows.propose_negatives import build_parser

    args = build_parser().parse_args(["--run", "r", "--dask-local", "--dask-memory-limit", "512MiB"])
    assert args.dask_memory_limit == "512MiB"
    for bad in ("lots", "0GB"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--run", "r", "--dask-memory-limit", bad])
        assert "--dask-memory-limit" in capsys.readouterr().err


# A task a worker cannot run makes Prefect's as_completed wait forever: fail after 240 s instead. That
# happened in whole suites when an earlier test had put bench/ on sys.path (bench/proposals.py then
# shadowed the package in the spawned workers; tests/bench/test_bench_imports.py guards it).
@pytest.mark.timeout(240, method="signal")
def test_mining_in_chunks_on_dask_matches_the_cli(scheduler, sites_run):
    from flows.propose_negatives import main as flow_main
    from llm.serve import fixed_answer, serve_in_thread
    from proposals.mine import main as mine_main

    answer, prompts, lock = fixed_answer('{"value": "Zoom"}'), [], threading.Lock()

    def complete(request):
        with lock:
            prompts.append(json.dumps([request["messages"], request["seed"]], sort_keys=True))
        return answer(request)
    server = serve_in_thread(complete, "scripted")
    cli, fl = sites_run / "cli", sites_run / "flow"
    common = ["--sample-size", "200", "--fill-base-url", server.base_url, "--fill-model", "scripted",
              "--fill-max-retries", "0", "--fill-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--quiet"]
    try:
        assert mine_main(["--run", str(cli), "--workers", "1", "--fill-cache-dir", str(sites_run / "cache-cli"),
                          *common]) == 0
        cli_prompts = list(prompts)
        flow_args = ["--run", str(fl), "--fill-cache-dir", str(sites_run / "cache-flow"), *common,
                     "--dask-address", scheduler]
        assert flow_main(flow_args) == 0
        flow_prompts = prompts[len(cli_prompts):]
        first = {rel: (fl / rel).read_bytes() for rel in ("candidates.parquet", "audit/candidates.json")}
        stats = _stage(fl, "proposals.mine")
        assert flow_main(flow_args) == 0                 # a rerun: every fill value from the cache
        rerun_prompts = prompts[len(cli_prompts) + len(flow_prompts):]
    finally:
        server.shutdown()
    for rel in ("candidates.parquet", "audit/candidates.json", "rejects.jsonl"):
        assert (fl / rel).read_bytes() == (cli / rel).read_bytes(), rel
    assert all((fl / rel).read_bytes() == data for rel, data in first.items())
    assert stats == _stage(cli, "proposals.mine")
    rerun = _stage(fl, "proposals.mine")
    assert rerun["llm"]["cached"] == rerun["llm"]["calls"] == stats["llm"]["calls"]
    assert stats["in"] == stats["out"] + sum(stats["rejected"].values())
    assert _rejects(fl, "proposals.mine") and _rejects(fl, "proposals.mine") == _rejects(cli, "proposals.mine")
    cands = pq.read_table(fl / "candidates.parquet").to_pylist()
    assert len({c["site"] for c in cands}) == SITES and sum(c["sampled"] for c in cands) == 200
    # The sites share their fill prompts (copies of the same pages): each is asked once for the run.
    # (The fill probe's prompts are asked again by the first attempt, which the cache answers.)
    sent = stats["llm"]["calls"] - stats["llm"]["cached"]
    assert stats["fill"]["fields"] > sent == len(cli_prompts) > 0
    assert sorted(flow_prompts) == sorted(cli_prompts) and len(set(flow_prompts)) == len(flow_prompts)
    assert rerun_prompts == []


class OutageOnce(ScriptedTeacher):
    """The scripted teacher, with one HTTP 500 on the first request about ``victim``."""

    def __init__(self, pairs, victim: str):
        super().__init__(pairs)
        self.victim, self.failed = victim, False

    def outcome(self, request):
        pair, outcome, label = super().outcome(request)
        with self.lock:
            first = pair["pair_id"] == self.victim and not self.failed
            self.failed = self.failed or first
        return pair, ("outage" if first else outcome), label


def _teacher_flags(server, cache) -> list[str]:
    return ["--base-url", server.base_url, "--model", "scripted-teacher", "--cache-dir", str(cache),
            "--max-retries", "0", "--api-key-env", "SURFPRM_TEST_KEY_UNSET"]


@pytest.mark.timeout(240, method="signal")
def test_verification_in_shards_on_dask_matches_the_cli_and_a_failed_shard_repeats_no_call(scheduler, tmp_path):
    from flows.synthesize import main as flow_main
    from teacher.verify import main as verify_main

    pairs = make_run(tmp_path / "cli", n_pairs=8)
    for name in ("flow", "retried"):
        shutil.copytree(tmp_path / "cli", tmp_path / name)
    script = {pairs[0]["pair_id"]: ["disagree", "agree"], pairs[1]["pair_id"]: ["disagree"] * 5,
              pairs[2]["pair_id"]: ["unparsed", "disagree", "agree"],
              pairs[3]["pair_id"]: ["truncated", "disagree", "disagree", "disagree", "disagree"]}
    # One teacher for the command and the flow (the endpoint is in stats.json), another that fails once.
    teacher, failing = ScriptedTeacher(pairs), OutageOnce(pairs, victim=pairs[5]["pair_id"])
    teacher.script = failing.script = script
    servers = {}
    try:
        servers["cli"] = servers["flow"] = start(teacher)
        servers["retried"] = start(failing)
        assert verify_main(["--run", str(tmp_path / "cli"), *_teacher_flags(servers["cli"], tmp_path / "c-cli"),
                            "--quiet"]) == 0
        n_cli = len(teacher.answered)
        for name in ("flow", "retried"):
            assert flow_main(["--run", str(tmp_path / name), "--verify-only", "--dask-address", scheduler,
                              *_teacher_flags(servers[name], tmp_path / f"c-{name}")]) == 0, name
    finally:
        for server in {id(s): s for s in servers.values()}.values():
            server.shutdown()
    cli = tmp_path / "cli"
    for name in ("flow", "retried"):
        for rel in ("preferences.parquet", "discarded.parquet"):
            assert (tmp_path / name / rel).read_bytes() == (cli / rel).read_bytes(), (name, rel)
        assert _rejects(tmp_path / name, "teacher.verify") == _rejects(cli, "teacher.verify")
    stats = _stage(tmp_path / "flow", "teacher.verify")
    assert stats == _stage(cli, "teacher.verify")
    assert stats["out"] == 6 and stats["rejected"] == {"all_attempts_disagree": 1, "no_agreement": 1}
    # The same calls as one process, none twice; the retried shard got its finished calls from the
    # cache and asked again only the one that met the outage.
    answered = {"cli": teacher.answered[:n_cli], "flow": teacher.answered[n_cli:], "retried": failing.answered}
    calls = sum(len(s) for s in script.values()) + len(pairs) - len(script)
    assert len(set(answered["cli"])) == len(answered["cli"]) == stats["calls_decided"] == calls
    assert sorted(answered["flow"]) == sorted(answered["retried"]) == sorted(answered["cli"])
    victim_tries = [s for s in failing.seen if s[0] == pairs[5]["pair_id"]]
    assert victim_tries == [(pairs[5]["pair_id"], 0)] * 2
    retried = _stage(tmp_path / "retried", "teacher.verify")
    assert retried["pending"] == 0 and 0 < retried["llm"]["cached"] < retried["llm"]["calls"]
    assert {k: v for k, v in retried.items() if k not in ("llm", "endpoint")} == \
        {k: v for k, v in stats.items() if k not in ("llm", "endpoint")}


def _die(code: int) -> None:
    import os

    os._exit(code)


@pytest.mark.timeout(120, method="signal")
def test_a_task_whose_workers_die_fails_the_flow_at_once(scheduler):
    """A task that kills its worker every time: Dask gives it up (KilledWorker) and its Prefect
    state stays Pending for ever; ``dask_gave_up`` turns that into a StageError naming the task (the
    10x job once waited an hour on such a task). Last in the module: it costs the cluster four
    worker restarts."""
    import sys

    import cloudpickle
    from prefect import flow, task
    from prefect.futures import as_completed

    from flows.common import StageError, dask_gave_up, on_dask

    cloudpickle.register_pickle_by_value(sys.modules[__name__])     # the workers cannot import this module
    die = task(_die, name="die", retries=0)

    @flow
    def doomed():
        futures = [die.submit(3)]
        for future in as_completed(futures):
            dask_gave_up(future, "die of site 'x'")

    with pytest.raises(StageError) as err:
        on_dask(doomed, scheduler)()
    assert err.value.code == 1 and "die of site 'x'" in err.value.message and "KilledWorker" in err.value.message

