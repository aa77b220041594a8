"""bench/prm_cpu.py's own logic: the run order of the ablations (its splits and intervals are
prm.split and prm.stats, tested in test_split_stats.py)."""

from __future__ import annotations

from bench.prm_cpu import SMALL, VARIANTS, BenchConfig


def test_trainings_run_the_main_comparison_and_no_graph_first():
    cfg = BenchConfig(seeds=(0, 1, 2), ablation_seeds=(0,))
    runs = cfg.trainings()
    assert runs[:4] == [("graph", 0), ("nograph", 0), ("graph", 1), ("graph", 2)]
    assert set(runs[4:]) == {(a, 0) for a in ("spatial", "temporal", "spatiotemporal")}
    assert len(runs) == len(set(runs)) == 3 + len(VARIANTS) - 1
    assert ("graph", 3) in BenchConfig(seeds=(0,), ablation_seeds=(3,)).trainings()   # the mixture at every ablation seed
    small = BenchConfig(**SMALL)
    assert small.trainings() == [("graph", 0)] and small.source == "canonical"
