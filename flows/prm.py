"""The ``train-prm`` and ``evaluate-prm`` Prefect flows.

    python -m flows.prm train --config configs/prm/cpu-demo.yaml
    python -m flows.prm evaluate --model runs/demo/prm/cpu-demo --bench runs/demo/export/trl/test.parquet \\
        --out runs/demo/prm/eval-trained.json

``train-prm`` runs ``prm.train`` for a config file (``overrides``: config fields by section,
``{"train": {"max_steps": 2}}``); ``evaluate-prm`` runs ``prm.evaluate`` for a model (a local
folder, or ``llm`` = ``LLMConfig`` fields with a ``base_url``) on a benchmark file. The logic
lives in :mod:`prm`; this module only wires it, with the CLIs' one-line errors and exit codes
(``flows.common``: a config that does not validate, a missing benchmark), and posts the training
summary and the evaluation table as markdown artifacts. Multi-GPU training is launched with
``accelerate launch -m prm.train`` rather than from a flow task.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from prefect import flow, task

from data.config import make_parser
from flows.common import (PENDING, StageError, cli_flow, exit_code, post_markdown, retry_unless_refused, stage_task,
                          unwrap)
from llm import LLMConfig
from prm.train import done_summary, train      # no TRL or torch until a flow trains


def load_config(config: str, overrides: dict):
    """The training config, checked as ``prm.train`` checks it before loading weights (its fields,
    batch arithmetic, data files and model folder): a refusal is the CLI's one ``error:`` line."""
    from prm.config import PRMTrainConfig          # TRL and torch: only when a flow trains

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
def evaluate_task(llm: dict, bench: str, out: str, both_orders: bool, name: str | None) -> dict:
    from prm.evaluate import ENDPOINT_MAX_TOKENS, markdown, run

    config = LLMConfig(**llm)
    if "max_tokens" not in llm and not config.is_local:     # a full judgment fits (as prm.evaluate's CLI)
        config = replace(config, max_tokens=max(config.max_tokens, ENDPOINT_MAX_TOKENS))
    result = run(config, bench, out, both_orders=both_orders, name=name)
    post_markdown("evaluate-prm-table", markdown(result), f"prm.evaluate of {result['model']} on {bench}")
    if result["infra_errors"]:
        raise StageError(f"{result['infra_errors']} judgments failed (outage); a retry resumes from the cache",
                         code=PENDING)
    return {"macro": result["macro"], "overall": result["overall"], "out": out}


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
def evaluate_prm_flow(bench: str, out: str, model: str | None = None, llm: dict | None = None,
                      both_orders: bool = False, name: str | None = None, max_tokens: int | None = None) -> dict:
    """Pairwise and best-of-N accuracy of a model (local folder or endpoint) on a benchmark file;
    ``max_tokens`` defaults to LLMConfig's for a local folder and to a full judgment's (1024) for
    an endpoint."""
    llm = {**({"max_tokens": max_tokens} if max_tokens else {}), **(llm or {}), **({"model": model} if model else {})}
    result = unwrap(evaluate_task(llm, bench, out, both_orders, name, return_state=True))
    print(f"macro pairwise {result['macro']['pairwise']:.4f}, best-of-N {result['macro']['bon']:.4f} -> {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("python -m flows.prm", __doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--config", required=True)
    e = sub.add_parser("evaluate")
    e.add_argument("--model", required=True)
    e.add_argument("--base-url")
    e.add_argument("--bench", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--both-orders", action="store_true")
    e.add_argument("--max-tokens", type=int, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "train":
        state = train_prm_flow(config=args.config, return_state=True)
    else:
        state = evaluate_prm_flow(bench=args.bench, out=args.out, model=args.model, both_orders=args.both_orders,
                                  llm={"base_url": args.base_url} if args.base_url else None,
                                  max_tokens=args.max_tokens, return_state=True)
    return exit_code(state)


if __name__ == "__main__":
    sys.exit(main())
