"""cli.config: one mechanism turns dataclass fields into flags and YAML keys, and every stage's
CLI keeps its documented flags under it."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass, field

import pytest

from cli.config import Configurable


@dataclass
class Inner:
    hops: int = 4
    same_op: bool = False


@dataclass
class Demo(Configurable):
    FILE_FLAG = "demo-config"
    YAML_KEY = "demo"

    rate: float = field(default=0.5, metadata={"help": "a rate, 50% by default"})
    name: str | None = None
    no_graph: bool = False
    cache: bool = True
    kind: str = field(default="a", metadata={"choices": ("a", "b")})
    tags: list[str] | None = None
    inner: Inner = field(default_factory=Inner)


def _parser(*prefixes: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    for p in prefixes:
        Demo.add_args(ap, prefix=p)
    return ap


def test_flags_override_the_file_which_overrides_the_defaults(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text("demo:\n  rate: 0.1\n  name: from-file\n  inner: {hops: 2}\n")
    args = _parser("").parse_args(["--demo-config", str(path), "--name", "flag", "--same-op"])
    cfg = Demo.from_args(args)
    assert (cfg.rate, cfg.name, cfg.inner) == (0.1, "flag", Inner(hops=2, same_op=True))
    assert Demo.given_names(args) == {"rate", "name", "inner"}
    assert Demo.from_args(_parser("").parse_args([])) == Demo()        # nothing given: the defaults
    path.write_text("rate: 0.2\nrat: 3\n")
    with pytest.raises(ValueError, match="rat"):
        Demo.from_yaml(path)


def test_booleans_are_switches_both_ways_and_no_x_fields_read_the_same_way_round():
    ap = _parser("")
    assert Demo.from_args(ap.parse_args(["--no-graph", "--no-cache"])).no_graph is True
    assert Demo.from_args(ap.parse_args(["--no-cache"])).cache is False
    assert Demo.from_args(ap.parse_args(["--no-graph", "--graph"])).no_graph is False     # the last one wins
    for bad in (["--cache", "true"], ["--no-graph", "false"], ["--kind", "c"]):
        with pytest.raises(SystemExit):
            ap.parse_args(bad)


def test_prefixes_keep_two_configs_apart_and_lists_repeat():
    args = _parser("prm-", "policy-").parse_args(["--prm-name", "j", "--policy-no-cache", "--prm-tags", "x", "y",
                                                  "--prm-tags", "z", "--policy-hops", "7"])
    prm, policy = Demo.from_args(args, "prm-"), Demo.from_args(args, "policy-")
    assert (prm.name, prm.cache, prm.tags, prm.inner.hops) == ("j", True, ["x", "y", "z"], 4)
    assert (policy.name, policy.cache, policy.inner.hops) == (None, False, 7)
    assert args.prm_name == "j" and args.policy_name is None          # dests: prefix_field, None when not given


# Every flag the README, the Makefile and DESIGN.md use, per command.
DOCUMENTED = {
    "proposals.mine": ["--run", "--sample-size", "--seed", "--axes", "--no-graph", "--prefer-same-op", "--workers",
                       "--near-hops", "--text-ratio", "--far-hops", "--window", "--max-per-rule", "--fill-base-url",
                       "--fill-model", "--fill-api-key-env", "--fill-llm-config"],
    "teacher.verify": ["--run", "--k", "--backend", "--base-url", "--model", "--api-key-env", "--llm-config",
                       "--seed", "--axtree-chars", "--max-tokens", "--temperature", "--prompt-template", "--untrusted",
                       "--quiet", "--no-cache"],
    "dataset.export": ["--run", "--format", "--seed", "--test-fraction", "--split", "--axtree-chars", "--preset",
                    "--prompt-template", "--untrusted", "--no-card"],
    "prm.evaluate": ["--model", "--base-url", "--bench", "--out", "--both-orders", "--include-sources", "--compare",
                     "--name", "--max-tokens", "--llm-config", "--prompt-template"],
    "prm.train": ["--config", "--dry-run", "--learning-rate", "--lora-r", "--train-file", "--output-dir",
                  "--max-steps", "--model-name-or-path", "--deepspeed", "--no-use-peft", "--eval-file"],
    "llm.client": ["--prompt", "--base-url", "--model", "--backend", "--api-key-env", "--llm-config", "--temperature",
                   "--seed", "--max-tokens", "--n", "--max-retries", "--timeout-s", "--concurrency", "--cache-dir",
                   "--no-cache", "--price-in", "--price-out"],
}


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_flags_stay(module, capsys):
    with pytest.raises(SystemExit) as done:
        importlib.import_module(module).main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    missing = [f for f in DOCUMENTED[module] if f not in text.split()
               and f + "," not in text.split() and not any(w.startswith(f + "=") for w in text.split())]
    assert not missing, f"{module} lost {missing}"


def test_mine_checks_its_axes_when_parsing(capsys):
    from proposals.mine import main

    with pytest.raises(SystemExit) as done:
        main(["--run", "nowhere", "--axes", "spatial,sideways"])
    assert done.value.code == 2 and "sideways" in capsys.readouterr().err


@dataclass
class Renamed(Configurable):
    FILE_FLAG = "renamed-config"

    sample_size: int = field(default=10, metadata={"min": 0, "deprecated": ("budget",), "help": "pairs sampled"})
    quiet: bool = field(default=False, metadata={"deprecated": ("silent",), "help": "no progress"})


def test_a_renamed_field_keeps_its_old_flag_and_yaml_key_with_a_warning_naming_the_new_one(tmp_path, capsys):
    ap = argparse.ArgumentParser()
    Renamed.add_args(ap, prefix="mine-")
    cfg = Renamed.from_args(ap.parse_args(["--mine-budget", "3", "--mine-no-silent"]), "mine-")
    assert cfg == Renamed(sample_size=3, quiet=False)
    err = capsys.readouterr().err
    assert "--mine-budget is deprecated" in err and "use --mine-sample-size" in err
    assert "--mine-no-silent is deprecated" in err and "use --mine-no-quiet" in err
    assert "budget" not in ap.format_help() and "--mine-sample-size" in ap.format_help()     # the old name is hidden
    assert Renamed.from_args(ap.parse_args(["--mine-sample-size", "4"]), "mine-").sample_size == 4
    assert capsys.readouterr().err == ""                                                   # the new name: no warning
    with pytest.raises(SystemExit):
        ap.parse_args(["--mine-budget", "-1"])                                    # ranges hold for the old name
    assert "--mine-budget: must be >= 0" in capsys.readouterr().err

    path = tmp_path / "old.yaml"
    path.write_text("budget: 5\n")
    assert Renamed.from_yaml(path).sample_size == 5
    assert "'budget' is deprecated" in capsys.readouterr().err
    assert Renamed.from_args(ap.parse_args(["--mine-renamed-config", str(path), "--mine-budget", "6"]),
                             "mine-").sample_size == 6                                     # the flag over the file
    path.write_text("budget: 5\nsample_size: 6\n")
    with pytest.raises(ValueError, match="old name of 'sample_size'"):
        Renamed.from_yaml(path)


def test_the_stage_commands_take_the_old_budget_flags(capsys):
    """``--budget`` was the sample size of proposals.mine and the AXTree characters of
    teacher.verify (and DESIGN.md documents it); the synthesize flow's ``--budget`` was the sample
    size and its ``--prompt-budget`` the AXTree characters. Each still works, and says what to use."""
    from flows.synthesize import build_parser as synthesize_parser
    from proposals.mine import MineConfig
    from proposals.mine import build_parser as mine_parser
    from teacher.verify import VerifyConfig
    from teacher.verify import build_parser as verify_parser

    assert MineConfig.from_args(mine_parser().parse_args(["--run", "r", "--budget", "8"])).sample_size == 8
    assert "use --sample-size" in capsys.readouterr().err
    assert VerifyConfig.from_args(verify_parser().parse_args(["--run", "r", "--budget", "900"])).axtree_chars == 900
    assert "use --axtree-chars" in capsys.readouterr().err
    args = synthesize_parser().parse_args(["--run", "r", "--budget", "8", "--prompt-budget", "900"])
    assert (MineConfig.from_args(args).sample_size, VerifyConfig.from_args(args).axtree_chars) == (8, 900)
    err = capsys.readouterr().err
    assert "--budget is deprecated" in err and "use --sample-size" in err and "use --axtree-chars" in err
    # dataset.export's --prompt-budget (trl-labels' AXTree characters) is --axtree-chars too
    from dataset.export import ExportOptions
    from dataset.export import build_parser as export_parser

    opts = ExportOptions.from_args(export_parser().parse_args(["--run", "r", "--prompt-budget", "900"]))
    assert opts.axtree_chars == 900 and "--prompt-budget is deprecated" in capsys.readouterr().err
