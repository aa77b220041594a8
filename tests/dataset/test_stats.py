"""dataset.stats.wilson: the one Wilson interval every report of a rate uses (the replay report,
the audit viewer, the PRM bench)."""

from dataset.stats import wilson


def test_wilson_interval():
    lo, hi = wilson(5, 10)
    assert lo < 0.5 < hi and abs((0.5 - lo) - (hi - 0.5)) < 1e-9          # symmetric at p = 1/2
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)               # the textbook value (z = 1.96)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0.2 < hi < 0.35                                  # not degenerate at p = 0
    assert wilson(100, 400)[1] - wilson(100, 400)[0] < wilson(25, 100)[1] - wilson(25, 100)[0]
    assert wilson(17, 24, confidence=0.99)[0] < wilson(17, 24)[0] and wilson(3, 3)[1] == 1.0
    assert wilson(0, 0) == (0.0, 1.0)
