"""A search whose PRM judged nothing says why (issue 41): ``prm_calls`` from the steps' judge
calls, and the reason line's cases."""

import json
from pathlib import Path

import pytest
from scripted_llm import scripted_server

from search.runner import SearchConfig, prm_calls, prm_never_called


def _row(steps, proposed, invalid=0, duplicate=0, calls=0):
    return {"n_steps": steps, "totals": {"proposed": proposed, "screened_invalid": invalid,
                                         "screened_duplicate": duplicate, "judge_calls": calls}}


def _config(prm="http-prm", n=5):
    return SearchConfig(prm=prm, policy="p", n=n)


def test_prm_calls_sum_the_steps_judge_calls():
    assert prm_calls([_row(3, 15, calls=8), _row(2, 10, calls=4), {"n_steps": 0}]) == 12


def test_a_called_prm_or_no_prm_gives_no_line():
    assert prm_never_called(_config(), [_row(3, 15, calls=1)]) is None
    assert prm_never_called(_config(prm="none"), [_row(3, 3)]) is None


def test_reasons_for_a_prm_never_called():
    assert "one candidate per step" in prm_never_called(_config(), [_row(4, 4), _row(2, 1)])      # the solver
    assert "--n 1" in prm_never_called(_config(n=1), [_row(4, 4)])
    assert "no episode took a step" in prm_never_called(_config(), [_row(0, 0)])
    why = prm_never_called(_config(), [_row(2, 10, invalid=6, duplicate=2)])
    assert "no step kept two candidates" in why and "6 invalid" in why and "2 duplicates" in why


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/lib/chromium/chromium").exists(), reason="Debian chromium not installed")
def test_a_solver_search_says_its_prm_was_never_called(tmp_path, capsys):
    """Issue 41's case: ``--policy solver`` proposes one candidate per step, so a PRM endpoint
    given to it is never asked; the run says so in one line and records ``prm_calls: 0``."""
    from search.miniwob import main

    asked = []
    prm = scripted_server(lambda payload: asked.append(payload) or ["<Answer>Response 1</Answer>"])
    out = tmp_path / "solver"
    try:
        assert main(["--policy", "solver", "--prm", "scripted-prm", "--prm-base-url", prm.base_url,
                     "--prm-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--tasks", "click-button", "--seeds", "0",
                     "--out", str(out)]) == 0
    finally:
        prm.shutdown()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prm_calls"] == 0 and summary["n"] == 5 and not asked
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("PRM never called:")]
    assert len(lines) == 1 and "at most one candidate per step" in lines[0]
