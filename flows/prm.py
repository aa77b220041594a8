"""The ``train-prm`` and ``evaluate-prm`` Prefect flows.

    python -m flows.prm train --config configs/prm/cpu-demo.yaml
    python -m flows.prm evaluate --model runs/demo/prm/cpu-demo --bench runs/demo/export/trl-labels/test.parquet \\
        --out runs/demo/prm/eval-trained.json

``train-prm`` runs ``prm.train`` for a config file (``overrides``: config fields by section,
``{"train": {"max_steps": 2}}``); ``evaluate-prm`` runs ``prm.evaluate`` for a model (a local
folder, or ``llm`` = ``LLMConfig`` fields with a ``base_url``) on a benchmark file. The logic
lives in :mod:`prm`; this module only wires it. Multi-GPU training is launched with
``accelerate launch -m prm.train`` rather than from a flow task.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from prefect import flow, task

from prm.config import PRMTrainConfig
from llm import LLMConfig


@task(name="train-prm-model")
def train_task(config: str, overrides: dict) -> dict:
    from prm.train import train

    record = train(PRMTrainConfig.from_yaml(config, overrides))    # overrides: the file's shape, on top
    return {k: v for k, v in record.items() if k != "config"}


@task(name="evaluate-prm-model", retries=2, retry_delay_seconds=30)
def evaluate_task(llm: dict, bench: str, out: str, both_orders: bool, name: str | None) -> dict:
    from prm.evaluate import ENDPOINT_MAX_TOKENS, run

    config = LLMConfig(**llm)
    if "max_tokens" not in llm and not config.is_local:     # a full judgment fits (as prm.evaluate's CLI)
        config = replace(config, max_tokens=max(config.max_tokens, ENDPOINT_MAX_TOKENS))
    result = run(config, bench, out, both_orders=both_orders, name=name)
    if result["infra_errors"]:
        from llm import InfraError

        raise InfraError(f"{result['infra_errors']} judgments failed (outage); a retry resumes from the cache")
    return {"macro": result["macro"], "overall": result["overall"], "out": out}


@flow(name="train-prm", log_prints=True)
def train_prm_flow(config: str = "configs/prm/cpu-demo.yaml", overrides: dict | None = None) -> dict:
    """Train a comparative PRM from a config file and save it merged."""
    record = train_task(config, dict(overrides or {}))
    print(f"trained {record['global_step']} steps in {record['seconds']} s -> {record['output_dir']}")
    return record


@flow(name="evaluate-prm", log_prints=True)
def evaluate_prm_flow(bench: str, out: str, model: str | None = None, llm: dict | None = None,
                      both_orders: bool = False, name: str | None = None, max_tokens: int | None = None) -> dict:
    """Pairwise and best-of-N accuracy of a model (local folder or endpoint) on a benchmark file;
    ``max_tokens`` defaults to LLMConfig's for a local folder and to a full judgment's (1024) for
    an endpoint."""
    llm = {**({"max_tokens": max_tokens} if max_tokens else {}), **(llm or {}), **({"model": model} if model else {})}
    result = evaluate_task(llm, bench, out, both_orders, name)
    print(f"macro pairwise {result['macro']['pairwise']:.4f}, best-of-N {result['macro']['bon']:.4f} -> {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.prm")
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
        train_prm_flow(config=args.config)
    else:
        evaluate_prm_flow(bench=args.bench, out=args.out, model=args.model, both_orders=args.both_orders,
                          llm={"base_url": args.base_url} if args.base_url else None, max_tokens=args.max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
