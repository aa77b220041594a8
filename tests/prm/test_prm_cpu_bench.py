"""bench/prm_cpu.py's own logic: its flags and the run order of the ablations (its splits and
intervals are prm.split and prm.stats, tested in test_split_stats.py)."""

from __future__ import annotations

import pytest

from bench.prm_cpu import SMALL, VARIANTS, BenchConfig, bench_config


def test_trainings_run_the_main_comparison_and_no_graph_first():
    cfg = BenchConfig(seeds=(0, 1, 2), ablation_seeds=(0,))
    runs = cfg.trainings()
    assert runs[:4] == [("graph", 0), ("nograph", 0), ("graph", 1), ("graph", 2)]
    assert set(runs[4:]) == {(a, 0) for a in ("spatial", "temporal", "spatiotemporal")}
    assert len(runs) == len(set(runs)) == 3 + len(VARIANTS) - 1
    # the mixture at every ablation seed
    assert ("graph", 3) in BenchConfig(seeds=(0,), ablation_seeds=(3,)).trainings()
    small = BenchConfig(**SMALL)
    assert small.trainings() == [("graph", 0)] and small.source == "canonical"


def test_flags_are_the_configs_fields_over_the_small_preset(capsys):
    cfg = bench_config(["--small", "--seeds", "3,4", "--ablation-seeds", "", "--keep-models", "--max-steps", "2"])
    assert (cfg.source, cfg.out, cfg.train_pairs) == ("canonical", "runs/prm-demo", SMALL["train_pairs"])
    assert (cfg.seeds, cfg.ablation_seeds, cfg.keep_models) == ((3, 4), (), True)
    assert cfg.extra_train_args == ["--max-steps", "2"]                     # passed on to prm.train
    full = bench_config(["--variants", "graph,temporal", "--workers", "2"])
    assert full == BenchConfig(variants=("graph", "temporal"), workers=2)
    for bad in (["--variants", "nograph"], ["--seeds", "1,x"], ["--workers", "0"]):
        with pytest.raises(SystemExit):
            bench_config(bad)
    assert "with graph" in capsys.readouterr().err
