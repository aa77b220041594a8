"""flows.search: the flows' task calls ``search.runner.run_search`` with the typed config; a setup
failure fails the task with the CLI's one-line message (a returned ``Failed`` state, no traceback),
and so does a run in which no task could run (the task's logic, without the Prefect engine); the
command line parses into the same config."""

import re

import pytest

from flows.search import search_task
from search.mag import MAG, MagSearch
from search.runner import parse_config
from search.webarena import WA_VARS, WEBARENA_LITE, WebArenaSearch


def test_command_line_parses_into_the_typed_config(tmp_path):
    cfg = parse_config(WEBARENA_LITE, ["--prm", "none", "--policy", "m", "--n", "5", "--task-ids", "4", "7", "--resume",
                                      "--policy-base-url", "http://gpu/v1", "--policy-max-tokens", "64"])
    assert cfg == WebArenaSearch(prm="none", policy="m", n=5, task_ids=[4, 7], resume=True,
                                 policy_llm={"base_url": "http://gpu/v1", "max_tokens": 64})
    llm = tmp_path / "llm.yaml"
    llm.write_text("temperature: 0.5\n")
    cfg = parse_config(MAG, ["--prm", "p", "--policy", "m", "--grounding", "coord", "--prm-llm-config", str(llm)])
    assert cfg == MagSearch(prm="p", policy="m", grounding="coord", prm_llm={"temperature": 0.5})
    assert cfg.max_steps == 25 and cfg.out == "runs/mag"


def test_setup_failure_fails_the_task(tmp_path, monkeypatch):
    for var in WA_VARS.values():
        monkeypatch.delenv(var, raising=False)
    state = search_task.fn(WEBARENA_LITE, WebArenaSearch(prm="none", policy="embedded", out=str(tmp_path / "o")))
    assert state.is_failed() and state.data.code == 2
    assert re.match(r"error: search.webarena setup failed: missing environment variable\(s\): WA_SHOPPING",
                    state.message)
    assert not (tmp_path / "o").exists()


def test_mag_setup_failure_fails_the_task(tmp_path, monkeypatch):
    for var in WA_VARS.values():
        monkeypatch.delenv(var, raising=False)
    state = search_task.fn(MAG, MagSearch(prm="none", policy="embedded", task_ids=[27], out=str(tmp_path / "o")))
    assert state.is_failed() and re.match(r"error: search.mag setup failed: missing environment variable\(s\): "
                                          r"WA_SHOPPING", state.message)


def test_a_run_where_no_task_could_run_fails_the_task(tmp_path, monkeypatch):
    import search.episodes as episodes

    monkeypatch.setattr(episodes, "load_models", lambda benchmark, config: (None, None))
    monkeypatch.setattr(episodes, "run_task", lambda benchmark, config, task, *a: {
        "type": "result", "task_id": task["task_id"], "site": "demo", "termination": "site_unreachable",
        "evaluated": False, "reward": None, "n_steps": 0})
    state = search_task.fn(WEBARENA_LITE, WebArenaSearch(prm="none", policy="embedded", demo=True,
                                                        out=str(tmp_path / "o")))
    assert state.is_failed() and state.data.code == 1 and re.search(r"no task could run: .*site_unreachable: 1",
                                                                     state.message)
    assert (tmp_path / "o" / "summary.json").exists()


def test_prm_judge_mode_auto_scores_a_local_prm_and_generates_at_an_endpoint(tmp_path):
    """'auto' gives a local PRM verdicts by scoring both orders (always a verdict, the bare answer
    tag as its text), an endpoint generates; a scoring mode at an endpoint is refused at parse time."""
    from types import SimpleNamespace

    from search.episodes import judge_factory, prm_judge_mode
    from tiny_lm import save_tiny_lm

    folder = save_tiny_lm(["goal button click scroll Response 1 2 <Answer> </Answer>"], tmp_path / "prm")
    cfg = parse_config(WEBARENA_LITE, ["--prm", folder, "--policy", "m"])
    assert cfg.prm_judge_mode == "auto"
    judge_for = judge_factory(cfg)
    obs = SimpleNamespace(goal="click the button", axtree="[12] button 'Go'", url="http://x/", start_url="http://x/")
    judgments = judge_for(obs, [])([("click('12')", "scroll(0, 200)"), ("scroll(0, 200)", "click('12')")])
    assert [j.verdict in (1, 2) for j in judgments] == [True, True]
    assert all(j.text.strip().startswith("<Answer>Response ") for j in judgments)
    # both orders combined: swapping the two actions swaps the verdict (no position bias)
    assert judgments[0].verdict != judgments[1].verdict

    generating = parse_config(WEBARENA_LITE, ["--prm", folder, "--policy", "m", "--prm-judge-mode", "generate"])
    assert prm_judge_mode(generating, local=True) == "generate" and prm_judge_mode(cfg, local=False) == "generate"
    with pytest.raises(SystemExit):
        parse_config(WEBARENA_LITE, ["--prm", "judge", "--prm-base-url", "http://gpu/v1", "--policy", "m",
                                    "--prm-judge-mode", "score"])
    assert parse_config(WEBARENA_LITE, ["--prm", "judge", "--prm-base-url", "http://gpu/v1",
                                       "--policy", "m"]).prm_judge_mode == "auto"
