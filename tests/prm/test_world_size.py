"""``$WORLD_SIZE`` that is not a positive integer is one line naming the variable (accelerate would
fail on it with a bare ``int()`` message), from the config and from ``prm.train``."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", ["abc", "0", "-2", "²"])
def test_a_bad_world_size_names_the_variable(monkeypatch, value):
    from prm.config import PRMTrainConfig

    monkeypatch.setenv("WORLD_SIZE", value)
    with pytest.raises(ValueError, match=r"\$WORLD_SIZE=.* is not a positive integer"):
        PRMTrainConfig(output_dir="out", model_name_or_path="m", train_file="t.parquet")


def test_world_size_is_read_when_it_is_one(monkeypatch):
    from prm.config import PRMTrainConfig

    monkeypatch.setenv("WORLD_SIZE", "1")
    assert PRMTrainConfig(output_dir="out", model_name_or_path="m", train_file="t.parquet").world_size() == 1


def test_prm_train_says_it_in_one_line(monkeypatch, capsys):
    from prm.train import main

    monkeypatch.setenv("WORLD_SIZE", "abc")
    assert main(["--config", str(ROOT / "configs/prm/cpu-demo.yaml"), "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: $WORLD_SIZE='abc' is not a positive integer (accelerate sets it to the number of processes; "
        "unset it to use the recipe's num_processes)"]
