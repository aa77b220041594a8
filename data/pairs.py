"""The old import path of ``judgment.pairs`` (a run's sampled pairs rendered for judging)."""

from judgment.pairs import PAIR_COLUMNS, Pair, coin_label, load_pairs  # noqa: F401
