"""flows.search: parameters become search.webarena / search.mag flags; a setup failure fails the
task with a clear message (the task's logic, without the Prefect engine)."""

import pytest

from flows.search import search_task, to_argv


def test_to_argv():
    assert to_argv(prm="none", policy="m", n=5, task_ids=[4, 7], sites=None, resume=True, both_orders=False) == [
        "--prm", "none", "--policy", "m", "--n", "5", "--task-ids", "4", "7", "--resume"]


def test_setup_failure_fails_the_task(tmp_path, monkeypatch, capsys):
    import search.webarena as wa

    for var in wa.WA_VARS.values():
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match="setup failed"):
        search_task.fn(["--prm", "none", "--policy", "embedded", "--out", str(tmp_path / "o")])
    assert "missing environment variable(s): WA_SHOPPING" in capsys.readouterr().err


def test_mag_setup_failure_fails_the_task(tmp_path, monkeypatch, capsys):
    import search.webarena as wa

    for var in wa.WA_VARS.values():
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match="search.mag setup failed"):
        search_task.fn(["--prm", "none", "--policy", "embedded", "--task-ids", "27", "--out", str(tmp_path / "o")],
                       module="search.mag")
    assert "search.mag: missing environment variable(s): WA_SHOPPING" in capsys.readouterr().err
