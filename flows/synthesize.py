"""The ``verify-pairs`` and ``synthesize`` Prefect flows.

    python -m flows.synthesize --run RUN [--budget 60 --k 5 --base-url URL --model M]   # the whole chain
    python -m flows.synthesize --run RUN --verify-only [--k 5 ...]                     # verify + export

``synthesize`` chains ingest -> ``build-graphs`` -> ``propose-negatives`` -> ``verify-pairs``;
``verify-pairs`` verifies the sampled pairs with the teacher, then writes the TRL and
WebPRMBench exports, the dataset card and the report. Pairs left pending by an outage make the
verification task fail after writing what was decided, so Prefect retries it; the LLM cache makes
the retry send only what is missing. The teacher is ``llm``: ``LLMConfig`` fields as a dict
(``{"base_url": ..., "model": ...}``; empty: the embedded model). The logic lives in
``teacher.verify`` and ``data.export``; this module only wires it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from prefect import flow, task

from data.export import FORMATS, export
from flows.build_graphs import build_graphs_flow
from flows.propose_negatives import propose_negatives_flow
from llm import InfraError, LLMConfig
from teacher.verify import VerifyConfig, format_summary, verify

BUNDLED = str(Path(__file__).resolve().parents[1] / "data" / "bundled" / "agentlab_workarena.parquet")


@task(name="ingest")
def ingest_task(source: str, inputs: list[str], run: str) -> dict:
    from data.ingest import ingest

    stats = ingest(source, inputs, run)
    print(stats.summary())
    return stats.as_dict()


@task(name="verify-sampled-pairs", retries=2, retry_delay_seconds=30)
def verify_task(run: str, config: dict, llm: dict) -> dict:
    stats = verify(run, VerifyConfig(**config), LLMConfig(**llm), progress=True)
    print(format_summary(stats))
    if stats.extra["pending"]:
        raise InfraError(f"{stats.extra['pending']} pairs pending after infrastructure failures")
    return stats.as_dict()


@task(name="export")
def export_task(run: str, fmt: str, seed: int, card: bool) -> list[str]:
    return [str(p) for p in export(run, fmt, seed=seed, card=card)]


@flow(name="verify-pairs", log_prints=True)
def verify_pairs_flow(run: str, k: int = 5, seed: int = 0, budget: int | None = None,
                      max_tokens: int | None = None, llm: dict | None = None, split_seed: int = 42) -> dict:
    """Verify a run's sampled pairs, then export (TRL, WebPRMBench), card and report."""
    config = {"k": k, "seed": seed, **({"budget": budget} if budget else {}),
              **({"max_tokens": max_tokens} if max_tokens else {})}
    stats = verify_task(run, config, dict(llm or {}))
    written = []
    for i, fmt in enumerate(FORMATS):
        written += export_task(run, fmt, split_seed, card=i == len(FORMATS) - 1)
    for path in written:
        print(f"wrote {path}")
    return stats


@flow(name="synthesize", log_prints=True)
def synthesize_flow(run: str = "runs/demo", inputs: list[str] | None = None, source: str = "canonical",
                    budget: int = 60, k: int = 5, seed: int = 0, prompt_budget: int | None = None,
                    max_tokens: int | None = None, llm: dict | None = None) -> dict:
    """Trajectories to a preference dataset: ingest, graphs, negatives, verification, exports."""
    ingest_task(source, inputs or [BUNDLED], run)
    build_graphs_flow(run=run)
    propose_negatives_flow(run=run, budget=budget)
    return verify_pairs_flow(run=run, k=k, seed=seed, budget=prompt_budget, max_tokens=max_tokens, llm=llm)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.synthesize")
    ap.add_argument("--run", required=True)
    ap.add_argument("--verify-only", action="store_true", help="only the verify-pairs flow (candidates exist)")
    ap.add_argument("--source", default="canonical")
    ap.add_argument("--input", nargs="*", default=None, help="default: the bundled AgentLab sample")
    ap.add_argument("--budget", type=int, default=60, help="pairs in the sample the teacher verifies")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--prompt-budget", type=int, default=None, help="AXTree characters in the prompt")
    LLMConfig.add_args(ap)
    args = ap.parse_args(argv)
    cfg = LLMConfig.from_args(args)      # flags over --llm-config; only what differs from the defaults travels
    default = LLMConfig()
    llm = {f.name: getattr(cfg, f.name) for f in fields(LLMConfig)
           if f.name not in ("seed", "max_tokens", "temperature") and getattr(cfg, f.name) != getattr(default, f.name)}
    seed = args.seed if args.seed is not None else 0
    if args.verify_only:
        verify_pairs_flow(run=args.run, k=args.k, seed=seed, budget=args.prompt_budget, max_tokens=args.max_tokens,
                          llm=llm)
    else:
        synthesize_flow(run=args.run, inputs=args.input, source=args.source, budget=args.budget, k=args.k, seed=seed,
                        prompt_budget=args.prompt_budget, max_tokens=args.max_tokens, llm=llm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
