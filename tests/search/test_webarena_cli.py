"""search.webarena: WebArena-Lite configs from the installed package, the preflight (missing
variables or sites: exit 2 with a clear message, before any model or browser), the summary."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

import search.webarena as wa

ALL_VARS = {v: f"http://127.0.0.1:9/{k}" for k, v in wa.WA_VARS.items()}


def test_configs_load_from_the_package():
    configs = wa.load_task_configs()
    assert len(configs) == 165
    assert {s for c in configs for s in c["sites"]} == set(wa.SITES)
    one = wa.load_task_configs(task_ids=[4])
    assert len(one) == 1 and one[0]["sites"] == ["shopping_admin"] and one[0]["start_url"] == "__SHOPPING_ADMIN__"
    gitlab = wa.load_task_configs(sites=["gitlab"])
    assert gitlab and all(c["sites"] == ["gitlab"] for c in gitlab)
    with pytest.raises(wa.SetupError, match="no WebArena-Lite task with id"):
        wa.load_task_configs(task_ids=[99999])
    with pytest.raises(wa.SetupError, match="unknown site"):
        wa.load_task_configs(sites=["amazon"])


def test_preflight_names_missing_variables_and_unreachable_sites():
    configs = wa.load_task_configs(sites=["reddit"])
    env = dict(ALL_VARS)
    del env["WA_REDDIT"], env["WA_MAP"]
    with pytest.raises(wa.SetupError, match="missing environment variable.*WA_REDDIT, WA_MAP"):
        wa.preflight(configs, environ=env)
    with pytest.raises(wa.SetupError, match=r"not reachable: reddit at http://127.0.0.1:9/reddit"):
        wa.preflight(configs, environ=ALL_VARS, timeout=2)
    assert wa.preflight(configs, environ=ALL_VARS, check_reachable=False)["reddit"] == "http://127.0.0.1:9/reddit"


def test_cli_exits_2_without_traceback_before_loading_anything(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)}
    code = ("import sys, search.webarena as wa, search.episodes as episodes\n"
            "episodes.load_models = lambda benchmark, config: sys.exit('models loaded')\n"
            "rc = wa.main(sys.argv[1:])\n"
            "assert not [m for m in sys.modules if m.startswith(('browsergym.', 'playwright', 'torch'))]\n"
            "sys.exit(rc)")
    for extra, expect in (({}, "missing environment variable(s): WA_SHOPPING, WA_SHOPPING_ADMIN"),
                          (ALL_VARS, "site(s) not reachable: shopping at http://127.0.0.1:9/shopping")):
        p = subprocess.run([sys.executable, "-c", code, "--prm", "none", "--policy", "embedded",
                            "--sites", "shopping", "--out", str(tmp_path / "o")],
                           env={**env, **extra}, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        assert expect in p.stderr and "Traceback" not in p.stderr and "models loaded" not in p.stderr
        assert "browsergym.webarenalite" not in p.stderr
    assert not (tmp_path / "o").exists()


def test_summary_per_site_macro_and_baseline_difference():
    rows = [{"site": "shopping", "evaluated": True, "success": True, "termination": "answered"},
            {"site": "shopping", "evaluated": True, "success": False, "termination": "step_budget"},
            {"site": "gitlab", "evaluated": True, "success": True, "termination": "answered"},
            {"site": "gitlab", "evaluated": False, "success": False, "termination": "site_unreachable"}]
    s = wa.summarize_run(rows)
    # every task counts: gitlab's unreachable site is a task not solved, listed beside the rate
    assert s["sites"]["shopping"]["success_rate"] == 0.5 and s["sites"]["gitlab"]["success_rate"] == 0.5
    assert s["sites"]["gitlab"]["env_failures"] == 1
    assert s["macro"]["success_rate"] == 0.5 and s["env_failures"] == 1
    assert [f["termination"] for f in s["env_failed_tasks"]] == ["site_unreachable"]
    assert s["terminations"] == {"answered": 2, "step_budget": 1, "site_unreachable": 1}
    base = wa.summarize_run(rows[1:2] + rows[3:])
    d = wa.summarize_run(rows, base)
    assert "macro_success" not in d and d["baseline_success_rate"] == 0.0
    assert d["difference"] == pytest.approx(0.5 - 0.0) and d["site_difference"] == {"shopping": 0.5,
                                                                                          "gitlab": 0.5}


def test_main_writes_jsonl_summary_and_resumes(tmp_path, monkeypatch):
    import search.episodes as episodes
    from search.demo_site import Shop

    ran = []

    def fake_run_task(benchmark, search_config, config, make_harness, make_agent, log, keep=None, steps=None):
        assert make_harness == "lite harness"
        ran.append(config["old_task_id"])
        log({"type": "step", "step": 0, "chosen": "click('1')"})
        row = {"type": "result", "task_id": config["old_task_id"], "site": wa.site_key(config),
               "termination": "answered", "evaluated": True, "success": config["old_task_id"] == 58,
               "reward": 1.0 if config["old_task_id"] == 58 else 0.0, "n_steps": 1}
        log(row)
        return row

    monkeypatch.setattr(episodes, "run_task", fake_run_task)
    monkeypatch.setattr(wa, "WEBARENA_LITE", replace(wa.WEBARENA_LITE, site_harnesses=lambda config: "lite harness"))
    monkeypatch.setattr(episodes, "load_models", lambda benchmark, config: (None, None))
    with Shop() as shop:
        for var in wa.WA_VARS.values():
            monkeypatch.setenv(var, shop.url)
        args = ["--prm", "none", "--policy", "embedded", "--task-ids", "58", "71", "--out", str(tmp_path)]
        assert wa.main(args) == 0
        assert sorted(ran) == [58, 71]
        lines = [json.loads(l) for l in (tmp_path / "tasks" / "58.jsonl").read_text().splitlines()]
        assert [l["type"] for l in lines] == ["step", "result"]
        s = json.loads((tmp_path / "summary.json").read_text())
        assert s["sites"]["map"]["success_rate"] == 0.5 and s["macro"]["success_rate"] == 0.5 and s["prm"] == "none"
        assert json.loads((tmp_path / "versions.json").read_text())["playwright"]
        (tmp_path / "tasks" / "71.jsonl").write_text('{"type": "step"}\n')    # interrupted mid-task
        ran.clear()
        assert wa.main(args + ["--resume"]) == 0
        assert ran == [71]
        # a resume with other settings is refused before anything runs
        assert wa.main(args + ["--resume", "--n", "3"]) == 2 and ran == [71]


@pytest.mark.parametrize("module", ["search.webarena", "search.mag"])
def test_cli_exits_1_when_no_task_could_run(tmp_path, monkeypatch, capsys, module):
    """Every task ended in an environment failure: the summary is written, the exit code says so."""
    import importlib

    import search.episodes as episodes

    cli = importlib.import_module(module)
    monkeypatch.setattr(episodes, "load_models", lambda benchmark, config: (None, None))
    monkeypatch.setattr(episodes, "run_task", lambda benchmark, config, task, *a: {
        "type": "result", "task_id": task["task_id"], "site": "demo", "termination": "site_unreachable",
        "evaluated": False, "reward": None, "n_steps": 0, "error": "net::ERR_CONNECTION_REFUSED"})
    out = tmp_path / "o"
    assert cli.main(["--demo", "--prm", "none", "--policy", "embedded", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{module}: no task could run: every task ended in an environment failure (site_unreachable: 1)" in err
    s = json.loads((out / "summary.json").read_text())
    assert s["tasks"] == s["env_failures"] == 1 and s["macro"]["success_rate"] == 0.0
    # once a task has run, the run succeeds again (the resumed task counts)
    monkeypatch.setattr(episodes, "run_task", lambda benchmark, config, task, *a: {
        "type": "result", "task_id": task["task_id"], "site": "demo", "termination": "step_budget",
        "evaluated": True, "success": False, "reward": 0.0, "n_steps": 1})
    assert cli.main(["--demo", "--prm", "none", "--policy", "embedded", "--out", str(out), "--resume"]) == 0
