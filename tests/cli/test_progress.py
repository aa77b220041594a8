"""Long commands show progress with an ETA on stderr and end with one summary line on stdout
(``cli.progress``); TRL's own progress bar stays on for prm.train."""

from __future__ import annotations

import pytest

from cli.progress import done_line, progress
from scripted_teacher import ScriptedTeacher, make_run, start


def test_a_bar_shows_count_rate_and_eta_on_stderr(capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    with progress(4, "demo", unit="pair") as bar:
        for _ in range(4):
            bar.update(1)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "demo: 100%" in captured.err and "4/4" in captured.err and "pair/s" in captured.err
    monkeypatch.setenv("TQDM_DISABLE", "1")
    with progress(4, "quiet", unit="pair") as bar:
        bar.update(4)
    assert "quiet" not in capsys.readouterr().err
    assert done_line("x.y", "3 things", 12.4, "wrote a") == "x.y: done: 3 things in 12 s; wrote a"


def test_teacher_verify_draws_a_bar_and_ends_with_its_summary_line(tmp_path, capsys, monkeypatch):
    from teacher.verify import main

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    pairs = make_run(tmp_path, n_pairs=3)
    server = start(ScriptedTeacher(pairs))
    try:
        code = main(["--run", str(tmp_path), "--base-url", server.base_url, "--model", "scripted-teacher",
                     "--cache-dir", str(tmp_path / "cache"), "--api-key-env", "SURFPRM_TEST_KEY_UNSET"])
    finally:
        server.shutdown()
    out, err = capsys.readouterr()
    assert code == 0
    assert "teacher.verify: 100%" in err and "3/3" in err and "kept=3" in err          # the bar, with its counts
    last = out.strip().splitlines()[-1]
    assert last.startswith("teacher.verify: done: kept 3 of 3 pairs (0 discarded, 0 pending) in ")
    assert last.endswith(f"wrote {tmp_path / 'preferences.parquet'} and {tmp_path / 'discarded.parquet'}")


def test_prm_train_keeps_trls_progress_bar():
    pytest.importorskip("trl")
    from prm.config import PRMTrainConfig

    cfg = PRMTrainConfig(model_name_or_path="x", train_file="t.parquet", output_dir="o", use_cpu=True)
    assert cfg.disable_tqdm is False and cfg.trainer_args().disable_tqdm is False
    off = PRMTrainConfig(model_name_or_path="x", train_file="t", output_dir="o", disable_tqdm=True)
    assert off.trainer_args().disable_tqdm
