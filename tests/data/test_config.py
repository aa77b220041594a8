"""data.config: one mechanism turns dataclass fields into flags and YAML keys, and every stage's
CLI keeps its documented flags under it."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass, field

import pytest

from data.config import Configurable


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
    "proposals.mine": ["--run", "--budget", "--seed", "--axes", "--no-graph", "--prefer-same-op", "--workers",
                       "--near-hops", "--text-ratio", "--far-hops", "--window", "--max-per-rule", "--fill-base-url",
                       "--fill-model", "--fill-api-key-env", "--fill-llm-config"],
    "teacher.verify": ["--run", "--k", "--backend", "--base-url", "--model", "--api-key-env", "--llm-config",
                       "--seed", "--budget", "--max-tokens", "--temperature", "--prompt-template", "--untrusted",
                       "--quiet", "--no-cache"],
    "dataset.export": ["--run", "--format", "--seed", "--test-fraction", "--split", "--prompt-budget", "--preset",
                    "--prompt-template", "--untrusted", "--no-card"],
    "prm.evaluate": ["--model", "--base-url", "--bench", "--out", "--both-orders", "--include-sources", "--compare",
                     "--name", "--max-tokens", "--llm-config", "--prompt-template"],
    "prm.train": ["--config", "--dry-run", "--learning-rate", "--lora-r", "--train-file", "--output-dir",
                  "--max-steps", "--name-or-path", "--deepspeed", "--no-lora", "--eval-file"],
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
