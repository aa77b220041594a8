"""A search whose PRM judged nothing says why (issue 41): ``prm_calls`` from the steps' judge
calls, and the reason line's cases."""

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
