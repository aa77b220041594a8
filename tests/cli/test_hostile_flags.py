"""Values that were not checked (issue 24, items 2 and 11): every flag is range-checked when it
is parsed (``cli.config``: field metadata ``min``/``max``/``gt``, floats finite, ints within 64
bits), so a bad value is a one-line error before any work or paid call, not a traceback after
it, a silently different output, or a run that stays pending forever; an immutable output fails
the writability pre-check."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

import pytest

from cli.config import Configurable, check_ranges
from data.rundir import RunDir, RunDirNotWritable
from llm.config import LLMConfig


def refused(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("flags, says", [
    (["--seed", str(10**23)], "--seed: must fit in 64 bits"),
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--temperature", "nan"], "--temperature: must be a finite number"),
    (["--temperature", "inf"], "--temperature: must be a finite number"),
    (["--timeout-s", "-1"], "--timeout-s: must be > 0"),
    (["--timeout-s", "inf"], "--timeout-s: must be a finite number"),
    (["--k", "0"], "--k: must be >= 1"),
    (["--axtree-chars", "-1"], "--axtree-chars: must be >= 1"),
    (["--budget", "-1"], "--budget: must be >= 1"),                 # the old name, checked the same
    (["--max-tokens", "0"], "--max-tokens: must be >= 1"),
    (["--concurrency", "0"], "--concurrency: must be >= 1"),
    (["--price-in", "nan"], "--price-in: must be a finite number"),
])
def test_teacher_verify_refuses_bad_values_at_parse_time(tmp_path, capsys, flags, says):
    from teacher.verify import main

    err = refused(main, ["--run", str(tmp_path / "no-such-run"), *flags], capsys)
    assert says in err


@pytest.mark.parametrize("flags, says", [
    (["--sample-size", "-1"], "--sample-size: must be >= 0"),
    (["--budget", "-1"], "--budget: must be >= 0"),                 # the old name, checked the same
    (["--fill-max-tokens", "0"], "--fill-max-tokens: must be >= 1"),
    (["--near-hops", "-1"], "--near-hops: must be >= 0"),
    (["--text-ratio", "nan"], "--text-ratio: must be a finite number"),
    (["--text-ratio", "1.5"], "--text-ratio: must be <= 1"),
    (["--max-per-rule", "-5"], "--max-per-rule"),
    (["--fill-temperature", "inf"], "--fill-temperature: must be a finite number"),
    (["--fill-timeout-s", "-1"], "--fill-timeout-s: must be > 0"),
])
def test_proposals_mine_refuses_bad_values_at_parse_time(tmp_path, capsys, flags, says):
    from proposals.mine import main

    err = refused(main, ["--run", str(tmp_path / "no-such-run"), *flags], capsys)
    assert says in err


def test_max_per_rule_zero_stays_valid_no_cap():
    import argparse

    from proposals.mine import MineConfig

    ap = argparse.ArgumentParser()
    MineConfig.add_args(ap)
    assert MineConfig.from_args(ap.parse_args(["--max-per-rule", "0", "--near-hops", "0"])).max_per_rule == 0


def test_the_llm_client_cli_refuses_a_nan_temperature(capsys):
    from llm.client import main

    assert "--temperature: must be a finite number" in refused(main, ["--prompt", "hi", "--temperature", "nan"],
                                                               capsys)


def test_yaml_values_are_range_checked_too(tmp_path):
    path = tmp_path / "llm.yaml"
    path.write_text("llm:\n  temperature: .nan\n")
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        LLMConfig.from_yaml(path)
    path.write_text("seed: 100000000000000000000000\n")
    with pytest.raises(ValueError, match="seed must fit in 64 bits"):
        LLMConfig.from_yaml(path)


def test_settings_built_in_python_are_checked_where_a_stage_starts(tmp_path):
    from teacher.verify import VerifyConfig, verify

    with pytest.raises(ValueError, match="seed must fit in 64 bits"):
        verify(tmp_path, VerifyConfig(seed=10**23))
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        LLMConfig(temperature=float("nan")).validate()


def test_the_mechanism_bounds_any_configurable_and_nested_fields():
    @dataclass
    class Inner:
        ratio: float = field(default=0.5, metadata={"min": 0, "max": 1})

    @dataclass
    class Demo(Configurable):
        n: int = field(default=1, metadata={"gt": 0})
        x: float = 1.0                                     # no metadata: still finite
        free: float = field(default=1.0, metadata={"finite": False})
        inner: Inner = field(default_factory=Inner)

    check_ranges(Demo(free=float("inf")))
    for bad in (Demo(n=0), Demo(x=float("nan")), Demo(inner=Inner(ratio=2.0)), Demo(n=2**64)):
        with pytest.raises(ValueError):
            check_ranges(bad)


def test_an_immutable_output_fails_the_writability_pre_check(tmp_path):
    run = RunDir(tmp_path)
    target = tmp_path / "candidates.parquet"
    target.write_bytes(b"old")
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs CAP_LINUX_IMMUTABLE and a file system with inode flags")
    try:
        with pytest.raises(RunDirNotWritable, match="immutable"):
            run.check_inputs("proposals.mine")
        RunDir(tmp_path).check_inputs("teacher.verify")          # another stage's outputs are free
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)


@pytest.mark.parametrize("module, flags, says", [
    ("dataset.export", ["--run", "x", "--test-fraction", "2"], "--test-fraction: must be <= 1"),
    ("dataset.export", ["--run", "x", "--axtree-chars", "0"], "--axtree-chars: must be >= 1"),
    ("prm.evaluate", ["--batch-size", "0"], "--batch-size: must be >= 1"),
    ("prm.evaluate", ["--limit-states", "-3"], "--limit-states: must be >= 1"),
    # llm.serve's limits are ServeConfig fields: refused where parsed, before torch or a model loads
    ("llm.serve", ["--max-queue", "-1"], "--max-queue: must be >= 0"),
    ("llm.serve", ["--max-connections", "0"], "--max-connections: must be >= 1"),
    ("llm.serve", ["--request-time-limit-s", "0"], "--request-time-limit-s: must be > 0"),
    ("llm.serve", ["--time-limit-s", "inf"], "--time-limit-s: must be a finite number"),
    ("llm.serve", ["--port", "70000"], "--port: must be <= 65535"),
    ("data.ingest", ["--source", "agentlab", "--input", "x", "--out", "y", "--max-decompressed-mb", "0"],
     "--max-decompressed-mb: must be positive"),
])
def test_other_stages_get_the_same_checks(capsys, module, flags, says):
    import importlib

    assert says in refused(importlib.import_module(module).main, flags, capsys)
