"""flows.search: the flows' task calls ``search.runner.run_search`` with the typed config; a setup
failure fails the task with a clear message, and so does a run in which no task could run (the
task's logic, without the Prefect engine); the command line parses into the same config."""

import pytest

from flows.search import search_task
from search.mag import Mag, MagSearch
from search.runner import parse_config
from search.webarena import WA_VARS, WebArenaLite, WebArenaSearch


def test_command_line_parses_into_the_typed_config(tmp_path):
    cfg = parse_config(WebArenaLite, ["--prm", "none", "--policy", "m", "--n", "5", "--task-ids", "4", "7", "--resume",
                                      "--policy-base-url", "http://gpu/v1", "--policy-max-tokens", "64"])
    assert cfg == WebArenaSearch(prm="none", policy="m", n=5, task_ids=[4, 7], resume=True,
                                 policy_llm={"base_url": "http://gpu/v1", "max_tokens": 64})
    llm = tmp_path / "llm.yaml"
    llm.write_text("temperature: 0.5\n")
    cfg = parse_config(Mag, ["--prm", "p", "--policy", "m", "--grounding", "coord", "--prm-llm-config", str(llm)])
    assert cfg == MagSearch(prm="p", policy="m", grounding="coord", prm_llm={"temperature": 0.5})
    assert cfg.max_steps == 25 and cfg.out == "runs/mag"


def test_setup_failure_fails_the_task(tmp_path, monkeypatch):
    for var in WA_VARS.values():
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match=r"search.webarena setup failed: missing environment variable\(s\): WA_SHOPPING"):
        search_task.fn(WebArenaLite, WebArenaSearch(prm="none", policy="embedded", out=str(tmp_path / "o")))
    assert not (tmp_path / "o").exists()


def test_mag_setup_failure_fails_the_task(tmp_path, monkeypatch):
    for var in WA_VARS.values():
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match=r"search.mag setup failed: missing environment variable\(s\): WA_SHOPPING"):
        search_task.fn(Mag, MagSearch(prm="none", policy="embedded", task_ids=[27], out=str(tmp_path / "o")))


def test_a_run_where_no_task_could_run_fails_the_task(tmp_path, monkeypatch):
    import search.runner as runner

    monkeypatch.setattr(runner, "load_models", lambda bench: (None, None))
    monkeypatch.setattr(runner, "run_task", lambda bench, task, *a: {
        "type": "result", "task_id": task["task_id"], "site": "demo", "termination": "site_unreachable",
        "evaluated": False, "reward": None, "n_steps": 0})
    with pytest.raises(RuntimeError, match=r"no task could run: .*site_unreachable: 1"):
        search_task.fn(WebArenaLite, WebArenaSearch(prm="none", policy="embedded", demo=True, out=str(tmp_path / "o")))
    assert (tmp_path / "o" / "summary.json").exists()
