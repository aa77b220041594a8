"""``prm.evaluate``'s intervals: a bootstrap over states, per source and for the macro (stratified)."""

from __future__ import annotations

from prm.evaluate import markdown, score


def _rows(source: str, states: int, pairs: int = 4) -> list[dict]:
    return [{"source_name": source, "state": s, "expected": 1} for s in range(states) for _ in range(pairs)]


def test_intervals_hold_the_point_values_and_narrow_with_more_states():
    rows = _rows("miniwob/a", 10) + _rows("miniwob/b", 40)
    # a: every state right but one pair in each odd state; b: the first half of its states right
    correct = [not (r["state"] % 2 and i % 4 == 0) if r["source_name"] == "miniwob/a" else r["state"] < 20
               for i, r in enumerate(rows)]
    result = score(rows, correct)
    for g in [*result["by_source"].values(), result["macro"]]:
        for m in ("pairwise", "bon"):
            lo, hi = g[f"{m}_ci"]
            assert 0 <= lo <= g[m] <= hi <= 1
    a, b = result["by_source"]["miniwob/a"], result["by_source"]["miniwob/b"]
    assert a["pairwise"] == 0.875 and a["bon"] == 0.5 and b["bon"] == 0.5
    assert a["bon_ci"][1] - a["bon_ci"][0] > b["bon_ci"][1] - b["bon_ci"][0]      # 10 states vs 40
    assert result["macro"]["bon_ci"][1] - result["macro"]["bon_ci"][0] < a["bon_ci"][1] - a["bon_ci"][0]
    assert score(rows, correct) == result                                        # seeded: a rerun is the same
    table = markdown({**result, "name": "x"})
    assert "pairwise 95% CI" in table and f"[{100 * a['bon_ci'][0]:.2f}, {100 * a['bon_ci'][1]:.2f}]" in table


def test_a_perfect_judge_has_a_degenerate_interval():
    rows = _rows("s", 5)
    result = score(rows, [True] * len(rows))
    assert result["macro"]["pairwise_ci"] == [1.0, 1.0] and result["by_source"]["s"]["bon_ci"] == [1.0, 1.0]
