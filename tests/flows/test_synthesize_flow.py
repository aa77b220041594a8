"""The verify-pairs flow wires teacher.verify and dataset.export: against the scripted teacher it
writes preferences, both exports, the card and the report, the same files and stats.json as
``teacher.verify`` and ``dataset.export`` run as commands, and posts its summary and the report as
markdown artifacts."""

from __future__ import annotations

import json
import shutil

import pytest

from prefect_artifacts import flow_run_artifacts
from scripted_teacher import ScriptedTeacher, make_run, start


@pytest.mark.slow      # starts a Prefect server (prefect_harness)
def test_verify_pairs_flow_writes_the_dataset(prefect_harness, tmp_path):
    from dataset.export import main as export_main
    from flows.synthesize import verify_pairs_flow
    from llm import LLMConfig
    from teacher.verify import main as verify_main

    pairs = make_run(tmp_path, n_pairs=4)
    cli = tmp_path.parent / f"{tmp_path.name}-cli"          # the same run, for the commands
    shutil.copytree(tmp_path, cli)
    teacher = ScriptedTeacher(pairs)
    teacher.script = {pairs[0]["pair_id"]: ["disagree"] * 5}
    server = start(teacher)
    try:
        llm = LLMConfig(base_url=server.base_url, model="scripted-teacher", cache_dir=str(tmp_path / "cache"),
                        max_retries=0, api_key_env="SURFPRM_TEST_KEY_UNSET")
        state = verify_pairs_flow(run=str(tmp_path), llm=llm, return_state=True)
        stats = state.result()
        assert verify_main(["--run", str(cli), "--base-url", server.base_url, "--model", "scripted-teacher",
                            "--cache-dir", str(cli / "cache"), "--max-retries", "0",
                            "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--quiet"]) == 0
        assert export_main(["--run", str(cli), "--format", "trl", "--format", "webprmbench"]) == 0
    finally:
        server.shutdown()
    # The flow wrote what the commands write: the dataset files byte for byte, stats.json (times aside).
    for rel in ("preferences.parquet", "discarded.parquet", "export/trl/train.parquet", "export/trl/test.parquet",
                "export/webprmbench.parquet", "rejects.jsonl"):
        assert (tmp_path / rel).read_bytes() == (cli / rel).read_bytes(), rel

    def timeless(run):
        stats = json.loads((run / "stats.json").read_text().replace(str(run), "RUN"))
        return {stage: {k: v for k, v in entry.items() if k != "seconds"} for stage, entry in stats.items()}

    assert timeless(tmp_path) == timeless(cli)
    assert stats["out"] == 3 and stats["rejected"] == {"all_attempts_disagree": 1} and stats["pending"] == 0
    for rel in ("preferences.parquet", "discarded.parquet", "export/trl/train.parquet", "export/trl/test.parquet",
                "export/webprmbench.parquet", "README.md", "report/README.md", "report/attempts.png"):
        assert (tmp_path / rel).exists(), rel
    recorded = json.loads((tmp_path / "stats.json").read_text())
    assert recorded["teacher.verify"]["out"] == 3 and recorded["data.export.trl"]["in"] == 3
    # The summary and the run's report are markdown artifacts of this flow run (the Prefect UI shows them).
    arts = flow_run_artifacts(state, ["verify-pairs-summary", "synthesis-report"])
    assert "teacher.verify: done: kept 3 of 4 pairs" in arts["verify-pairs-summary"].data
    assert arts["synthesis-report"].data == (tmp_path / "report" / "README.md").read_text()
