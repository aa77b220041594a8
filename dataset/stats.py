"""The confidence interval every report of a rate uses: Wilson's score interval of ``k`` of ``n``."""

from __future__ import annotations


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of the proportion ``k/n`` (``scipy.stats.binomtest``); (0, 1)
    when there is nothing to count."""
    from scipy.stats import binomtest

    if n == 0:
        return (0.0, 1.0)
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))
