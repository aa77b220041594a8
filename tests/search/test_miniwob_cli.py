"""search.miniwob without a browser: the setup errors (exit 2 before any model or browser, also for
--policy solver on a task without a solver), the
per-task summary; search.trajectories' rows from an episode's steps."""

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

import search.miniwob as mw
from harness.miniwob import base_url, default_url, task_classes
from search.trajectories import episode_records


def test_cli_exits_2_before_loading_models_or_starting_a_browser(tmp_path):
    code = ("import sys, search.miniwob as mw, search.episodes as episodes\n"
            "episodes.load_models = lambda benchmark, config: sys.exit('models loaded')\n"
            "sys.exit(mw.main(sys.argv[1:]))")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    for extra, flags, expect in (
            ({}, ["--tasks", "click-buton"], "unknown MiniWoB task(s) ['click-buton']"),
            ({}, ["--seeds", "4-2"], "--seeds: empty range '4-2'"),
            ({}, ["--demo"], "use --tasks and --seeds"),
            ({"MINIWOB_URL": tmp_path.as_uri() + "/"}, ["--tasks", "click-test"], "no page for ['click-test']")):
        p = subprocess.run([sys.executable, "-c", code, "--prm", "none", "--policy", "embedded",
                            "--out", str(tmp_path / "o"), *flags], env={**env, **extra},
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and expect in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and "models loaded" not in p.stderr
    assert not (tmp_path / "o").exists()


def test_summary_per_task_and_baseline_difference():
    def row(task, seed, ok, evaluated=True):
        return {"type": "result", "task_id": f"{task}.{seed}", "site": f"miniwob.{task}", "evaluated": evaluated,
                "success": ok, "reward": float(ok) if evaluated else None,
                "termination": "task_done" if evaluated else "env_error"}
    config = mw.MiniWoBSearch(prm="none", policy="x")
    rows = [row("click-test", 0, True), row("click-test", 1, True), row("enter-text", 0, True),
            row("enter-text", 1, False, evaluated=False)]
    s = mw.summarize(config, rows, None)
    assert s["per_task"]["miniwob.click-test"]["success_rate"] == 1.0
    assert s["per_task"]["miniwob.enter-text"] == {"tasks": 2, "evaluated": 1, "success": 1, "env_failures": 1,
                                                    "success_rate": 0.5}
    assert s["macro"]["success_rate"] == 0.75 and s["tasks"] == 4 and s["env_failures"] == 1
    base = mw.summarize(config, [row("click-test", 0, False), row("enter-text", 0, True)], None)
    d = mw.summarize(config, rows, json.loads(json.dumps(base)))
    assert d["baseline_success_rate"] == 0.5 and d["difference"] == pytest.approx(0.25)
    assert d["task_difference"] == {"miniwob.click-test": 1.0, "miniwob.enter-text": -0.5}


@dataclass
class Obs:
    axtree: str
    url: str = "file:///p/click-test.html"
    goal: str = "Click the button."
    last_action_error: str = ""


@dataclass
class Step:
    chosen: str | None
    error: str = ""


def test_trajectory_rows_from_an_episode():
    o0, o1, o2 = Obs("[1] button 'a'"), Obs("[1] button 'a'\n[2] textbox ''"), Obs("[3] button 'done'",
                                                                                  last_action_error="Timeout")
    decided = [(Step(None, "no valid candidate"), o0),              # nothing executed: no row
               (Step("click('1')"), o0),
               (Step("goto('http://x')", "refused: goto('http://x') leaves the configured sites"), o1),
               (Step("fill('2', 'w')"), o1)]
    row = {"task_id": "click-test.3", "evaluated": True, "reward": 1.0, "termination": "task_done"}
    recs = episode_records(decided, o2, row, run_id="r1", benchmark="search.miniwob",
                           site_of_obs=lambda o: "miniwob.click-test", settings={"prm": "none"})
    assert [(r.step_idx, r.action, r.action_error) for r in recs] == [
        (0, "click('1')", None), (1, "goto('http://x')", "refused: goto('http://x') leaves the configured sites"),
        (2, "fill('2', 'w')", "Timeout"), (3, None, None)]
    assert [r.observation for r in recs] == [o0.axtree, o1.axtree, o1.axtree, o2.axtree]
    assert {r.traj_id for r in recs} == {"r1/click-test.3"} and all(r.success is True for r in recs)
    assert json.loads(recs[0].meta)["reward"] == 1.0
    # an environment failure: not evaluated, success unknown; a page that never loaded: no rows
    failed = episode_records(decided[:2], o1, {**row, "evaluated": False, "reward": None}, run_id="r1",
                             benchmark="b", site_of_obs=lambda o: "s")
    assert [r.success for r in failed] == [None, None]
    assert episode_records([], None, row, run_id="r1", benchmark="b", site_of_obs=lambda o: "s") == []


def test_a_miniwob_url_without_its_trailing_slash_still_names_the_pages(monkeypatch):
    """BrowserGym joins MINIWOB_URL and the page name as strings: the runner adds the slash a user
    may leave out (check_pages would pass either way)."""
    monkeypatch.setenv("MINIWOB_URL", default_url().rstrip("/"))
    assert [t["task_id"] for t in mw.tasks(mw.MiniWoBSearch(prm="none", policy="x", tasks=["click-test"], seeds="0"))] \
        == ["click-test.0"]
    page = task_classes()["click-test"](seed=0, base_url=base_url()).url
    assert page == default_url() + "click-test.html"


def test_a_task_without_a_solver_is_refused_before_anything_runs(tmp_path, capsys):
    assert mw.main(["--prm", "none", "--policy", "solver", "--tasks", "click-menu", "--out", str(tmp_path / "o")]) == 2
    assert "no solver for ['click-menu']" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
