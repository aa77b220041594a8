"""The ``train-prm`` and ``evaluate-prm`` Prefect flows.

    python -m flows.prm train --config configs/prm/cpu-demo.yaml
    python -m flows.prm evaluate --model runs/demo/prm/cpu-demo --bench runs/demo/export/trl/test.parquet \\
        --out runs/demo/prm/eval-trained.json

``train-prm`` runs ``prm.train`` for a config file (``overrides``: config fields by section,
``{"train": {"max_steps": 2}}``); ``evaluate-prm`` runs ``prm.evaluate`` for a model (a local
folder, or ``llm`` = ``LLMConfig`` fields with a ``base_url``) on a benchmark file, with
``prm.evaluate``'s options (``options``: ``EvaluateOptions``, the same flags and defaults, so
``--judge-mode``, ``--device``, ``--dtype`` and the generate default of 1,024 tokens apply as in
the CLI). The logic
lives in :mod:`prm`; this module only wires it, with the CLIs' one-line errors and exit codes
(``flows.common``: a config that does not validate, a missing benchmark), and posts the training
summary and the evaluation table as markdown artifacts. Multi-GPU training is launched with
``accelerate launch -m prm.train`` rather than from a flow task.
"""

from __future__ import annotations

import sys

from prefect import flow, task

from cli.config import CLIParser, make_parser
from flows.common import (
    PENDING,
    StageError,
    cli_flow,
    exit_code,
    post_markdown,
    retry_unless_refused,
    stage_task,
    unwrap,
)
from llm import LLMConfig
from prm.evaluate import EvaluateOptions
from prm.train import done_summary, train  # no TRL or torch until a flow trains


def load_config(config: str, overrides: dict):
    """The training config, checked as ``prm.train`` checks it before loading weights (its fields,
    batch arithmetic, data files and model folder): a refusal is the CLI's one ``error:`` line."""
    from prm.config import PRMTrainConfig  # TRL and torch: only when a flow trains

    try:
        cfg = PRMTrainConfig.from_yaml(config, overrides)        # overrides: the file's shape, on top
    except (ValueError, TypeError, FileNotFoundError) as e:      # as prm.train's CLI
        raise StageError(str(e)) from None
    if problems := cfg.validate(check_paths=True):
        raise StageError(f"{config}: invalid config: " + "; ".join(problems))
    return cfg


@task(name="train-prm-model")
def train_task(config: str, overrides: dict) -> dict:
    record = train(load_config(config, overrides))
    post_markdown("train-prm-summary", done_summary(record), f"prm.train of {config}")
    return {k: v for k, v in record.items() if k != "config"}


@task(name="evaluate-prm-model", retries=2, retry_delay_seconds=30, retry_condition_fn=retry_unless_refused)
@stage_task(refused=(FileNotFoundError, ValueError))        # as prm.evaluate's CLI: a missing or unreadable bench
def evaluate_task(options: EvaluateOptions, llm: LLMConfig, max_tokens_given: bool) -> dict:
    """``prm.evaluate.run`` with every option of its CLI; a judge that generates (an endpoint, or a
    local judge in ``generate`` mode) gets a full judgment's tokens unless ``max_tokens_given``."""
    from prm.evaluate import markdown, run
    from prm.judge import generate_max_tokens

    result = run(generate_max_tokens(llm, options.judge_mode, given=max_tokens_given), options)
    post_markdown("evaluate-prm-table", markdown(result), f"prm.evaluate of {result['model']} on {options.bench}")
    if result["infra_errors"]:
        raise StageError(f"{result['infra_errors']} judgments failed (outage); a retry resumes from the cache",
                         code=PENDING)
    return {"macro": result["macro"], "overall": result["overall"], "out": options.out}


@flow(name="train-prm", log_prints=True)
@cli_flow
def train_prm_flow(config: str = "configs/prm/cpu-demo.yaml", overrides: dict | None = None) -> dict:
    """Train a comparative PRM from a config file and save it merged."""
    load_config(config, dict(overrides or {}))      # refused here, in one line, before a task starts
    record = unwrap(train_task(config, dict(overrides or {}), return_state=True))
    print(done_summary(record))
    return record


@flow(name="evaluate-prm", log_prints=True)
@cli_flow
def evaluate_prm_flow(options: EvaluateOptions | None = None, llm: LLMConfig | None = None,
                      bench: str | None = None, out: str | None = None, model: str | None = None,
                      max_tokens: int | None = None) -> dict:
    """Pairwise and best-of-N accuracy of a model (local folder or endpoint) on a benchmark file.
    ``options``: ``prm.evaluate``'s flags as fields (``EvaluateOptions``: both orders, judge mode,
    device, dtype, ...); ``llm``: the judge (``LLMConfig``). ``bench``, ``out``, ``model`` and
    ``max_tokens``, when given, override theirs. A judge that generates (an endpoint, or a local
    judge in ``generate`` mode) gets a full judgment's 1,024 tokens unless ``max_tokens`` is given
    or ``llm.max_tokens`` differs from ``LLMConfig``'s default."""
    from dataclasses import replace

    options, llm = options or EvaluateOptions(), llm or LLMConfig()
    options = replace(options, **{k: v for k, v in (("bench", bench), ("out", out)) if v is not None})
    llm = replace(llm, **{k: v for k, v in (("model", model), ("max_tokens", max_tokens)) if v is not None})
    if not options.bench or not options.out:
        raise StageError("--bench and --out are required")
    given = max_tokens is not None or llm.max_tokens != LLMConfig.max_tokens
    result = unwrap(evaluate_task(options, llm, given, return_state=True))
    print(f"macro pairwise {result['macro']['pairwise']:.4f}, best-of-N {result['macro']['bon']:.4f} -> {options.out}")
    return result


def build_parser(prog: str = "python -m flows.prm", doc: str = __doc__) -> CLIParser:
    """``train --config FILE`` and ``evaluate`` with prm.evaluate's own flags and defaults."""
    ap = make_parser(prog, doc)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("train").add_argument("--config", required=True, help="a prm.train YAML recipe")
    e = sub.add_parser("evaluate", description="prm.evaluate's flags, as a flow run")
    EvaluateOptions.add_args(e)
    LLMConfig.add_args(e)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.cmd == "train":
        return exit_code(train_prm_flow(config=args.config, return_state=True))
    options = EvaluateOptions.from_args(args)
    if options.compare:                 # a table of finished results: no flow run
        from prm.evaluate import main as evaluate_main

        return evaluate_main(argv[1:])
    llm = LLMConfig.from_args(args)
    given = "max_tokens" in LLMConfig.given_names(args)
    state = evaluate_prm_flow(options=options, llm=llm, max_tokens=llm.max_tokens if given else None,
                              return_state=True)
    return exit_code(state)


if __name__ == "__main__":
    sys.exit(main())
