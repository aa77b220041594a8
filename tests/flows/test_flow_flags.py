"""A flow's command takes its stage's flags, from the stage's own config dataclass: every flag of
``graph.build``, ``proposals.mine``, ``teacher.verify`` and ``prm.evaluate`` (each field of
``BuildConfig``, ``MineConfig`` with its rule ``Params``, the fill model's ``LLMConfig``,
``VerifyConfig`` and the teacher's ``LLMConfig``, ``EvaluateOptions`` and the judge's
``LLMConfig``) is a flag of the flow's command, with the same default."""

from __future__ import annotations

import argparse
import typing

import pytest


def _parser_of(module, sub: str | None = None) -> argparse.ArgumentParser:
    """The parser a command builds (``build_parser``); ``sub``: that subcommand's parser."""
    parser = module.build_parser()
    if sub:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[sub]
    return parser


def _flags(parser) -> dict[str, object]:
    """Every --flag of a parser and the default of its destination."""
    return {s: a.default for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


def _stage_flags():
    import flows.build_graphs
    import flows.prm
    import flows.propose_negatives
    import flows.synthesize
    import graph.build
    import prm.evaluate
    import proposals.mine
    import teacher.verify

    return [(graph.build, flows.build_graphs, None, ()),
            (proposals.mine, flows.propose_negatives, None, ()),
            (prm.evaluate, flows.prm, "evaluate", ()),
            # synthesize: --seed is the teacher's (the miner keeps its own), --budget the sample size,
            # --gmcp-ratio the export's (dataset.export; the miner's is --pool-gmcp-ratio)
            (proposals.mine, flows.synthesize, None, ("--seed", "--workers", "--quiet", "--no-quiet", "--gmcp-ratio")),
            (teacher.verify, flows.synthesize, None, ("--budget", "--quiet", "--no-quiet"))]


@pytest.mark.parametrize("i", range(5), ids=["build-graphs", "propose-negatives", "evaluate-prm", "synthesize-mine",
                                             "synthesize-verify"])
def test_every_stage_flag_is_a_flow_flag_with_its_default(i):
    stage_module, flow_module, sub, apart = _stage_flags()[i]
    stage = {f: d for f, d in _flags(_parser_of(stage_module)).items() if f not in apart}
    flow = _flags(_parser_of(flow_module, sub))
    missing = sorted(set(stage) - set(flow))
    assert not missing, f"the flow's command lacks {missing}"
    assert {f: flow[f] for f in stage} == stage


def test_every_config_field_is_a_flag():
    """The stage configs' fields themselves (nested ones flattened as cli.config does), so a field
    added to a config shows up in the flow's command or fails here."""
    from dataclasses import fields, is_dataclass

    import flows.build_graphs
    import flows.prm
    import flows.propose_negatives
    import flows.synthesize
    from cli.config import flag_name
    from flows.common import DaskConfig
    from graph.build import BuildConfig
    from llm import LLMConfig
    from prm.evaluate import EvaluateOptions
    from proposals.mine import MineConfig

    def names(cls, prefix=""):
        """Flag names of ``cls``'s fields; a dict field is set in the config file (FILE_FLAG) only."""
        hints = typing.get_type_hints(cls)
        if getattr(cls, "FILE_FLAG", None):
            yield flag_name(cls.FILE_FLAG.replace("-", "_"), prefix)
        for f in fields(cls):
            if not f.init or f.name.startswith("_"):
                continue
            if typing.get_origin(hints[f.name]) is dict or hints[f.name] is dict:
                continue
            if is_dataclass(f.default_factory if callable(f.default_factory) else None):
                yield from names(f.default_factory, prefix)
            else:
                yield flag_name(f.name, prefix)

    cases = [(flows.build_graphs, None, [(BuildConfig, ""), (DaskConfig, "")]),
             (flows.propose_negatives, None, [(MineConfig, ""), (LLMConfig, "fill-"), (DaskConfig, "")]),
             (flows.synthesize, None, [(DaskConfig, "")]),
             (flows.prm, "evaluate", [(EvaluateOptions, ""), (LLMConfig, "")])]
    for module, sub, configs in cases:
        flags = _flags(_parser_of(module, sub))
        for cls, prefix in configs:
            missing = [n for n in names(cls, prefix) if n not in flags]
            assert not missing, f"{module.__name__} lacks {cls.__name__}'s {missing}"
