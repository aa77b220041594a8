"""The ``verify-pairs`` and ``synthesize`` Prefect flows.

    python -m flows.synthesize --run RUN [--budget 60 --k 5 --base-url URL --model M]   # the whole chain
    python -m flows.synthesize --run RUN --verify-only [--k 5 ...]                     # verify + export

``synthesize`` chains ingest -> ``build-graphs`` -> ``propose-negatives`` -> ``verify-pairs``;
``verify-pairs`` verifies the sampled pairs with the teacher, then writes the TRL and
WebPRMBench exports, the dataset card and the report. Pairs left pending by an outage make the
verification task fail after writing what was decided, so Prefect retries it; the LLM cache makes
the retry send only what is missing. The teacher is ``llm``: ``LLMConfig`` fields as a dict
(``{"base_url": ..., "model": ...}``; empty: the embedded model). The logic lives in
``data.ingest``, ``teacher.verify`` and ``dataset.export``, whose functions the tasks call as the CLIs
do (the same one-line errors and exit codes: ``flows.common``); this module only wires them. The
verification summary and the run's report (``RUN/report/README.md``) are posted as markdown
artifacts, shown in the Prefect UI under the flow run's Artifacts.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

from prefect import flow, task

from data.config import make_parser
from dataset.export import FORMATS, export
from flows.build_graphs import build_graphs_flow
from flows.common import (PENDING, StageError, cli_flow, exit_code, post_markdown, retry_unless_refused,
                          stage_task, unwrap)
from flows.propose_negatives import propose_negatives_flow
from llm import LLMConfig
from teacher.verify import VerifyConfig, done_summary, format_summary, verify

BUNDLED = str(Path(__file__).resolve().parents[1] / "data" / "bundled" / "agentlab_workarena.parquet")


@task(name="ingest", retries=1, retry_condition_fn=retry_unless_refused)
@stage_task(refused=(FileNotFoundError, ValueError))        # as data.ingest's CLI
def ingest_task(source: str, inputs: list[str], run: str) -> dict:
    from data.ingest import ingest
    from data.rundir import RunDir

    stats = ingest(source, inputs, run)
    print(stats.summary())
    print(f"wrote {RunDir(run).trajectories}")
    if stats.n_out == 0:               # as data.ingest: exit code 1
        raise StageError("nothing could be ingested; see rejects.jsonl", code=1)
    return stats.as_dict()


@task(name="verify-sampled-pairs", retries=2, retry_delay_seconds=30, retry_condition_fn=retry_unless_refused)
@stage_task
def verify_task(run: str, config: dict, llm: dict) -> dict:
    stats = verify(run, VerifyConfig(**config), LLMConfig(**llm), progress=True)
    text = format_summary(stats) + "\n" + done_summary(stats, run)
    print(text)
    post_markdown("verify-pairs-summary", "```\n" + text + "\n```", f"teacher.verify of {run}")
    if stats.extra["pending"]:         # retried (the LLM cache answers what was decided); as the CLI: code 3
        raise StageError(f"{stats.extra['pending']} pairs pending after infrastructure failures "
                         f"{stats.extra['pending_errors']}: rerun to resume them", code=PENDING)
    return stats.as_dict()


@task(name="export", retries=1, retry_condition_fn=retry_unless_refused)
@stage_task
def export_task(run: str, fmt: str, seed: int, card: bool) -> list[str]:
    return [str(p) for p in export(run, fmt, seed=seed, card=card)]


def post_report(run: str) -> None:
    """The run's report (``dataset.report``: ``RUN/report/README.md``) as a markdown artifact; its
    figures stay files beside it."""
    from pathlib import Path

    report = Path(run) / "report" / "README.md"
    if report.exists():
        post_markdown("synthesis-report", report.read_text(encoding="utf-8"), f"report of {run} (figures in {report.parent})")


@flow(name="verify-pairs", log_prints=True)
@cli_flow
def verify_pairs_flow(run: str, k: int = 5, seed: int = 0, budget: int | None = None,
                      max_tokens: int | None = None, llm: dict | None = None, split_seed: int = 42) -> dict:
    """Verify a run's sampled pairs, then export (TRL, WebPRMBench), card and report."""
    config = {"k": k, "seed": seed, **({"budget": budget} if budget else {}),
              **({"max_tokens": max_tokens} if max_tokens else {})}
    stats = unwrap(verify_task(run, config, dict(llm or {}), return_state=True))
    written = []
    for i, fmt in enumerate(FORMATS):
        written += unwrap(export_task(run, fmt, split_seed, card=i == len(FORMATS) - 1, return_state=True))
    for path in written:
        print(f"wrote {path}")
    post_report(run)
    return stats


@flow(name="synthesize", log_prints=True)
@cli_flow
def synthesize_flow(run: str = "runs/demo", inputs: list[str] | None = None, source: str = "canonical",
                    budget: int = 60, k: int = 5, seed: int = 0, prompt_budget: int | None = None,
                    max_tokens: int | None = None, llm: dict | None = None) -> dict:
    """Trajectories to a preference dataset: ingest, graphs, negatives, verification, exports."""
    unwrap(ingest_task(source, inputs or [BUNDLED], run, return_state=True))
    unwrap(build_graphs_flow(run=run, return_state=True))
    unwrap(propose_negatives_flow(run=run, budget=budget, return_state=True))
    return unwrap(verify_pairs_flow(run=run, k=k, seed=seed, budget=prompt_budget, max_tokens=max_tokens, llm=llm,
                                    return_state=True))


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("python -m flows.synthesize", __doc__)
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
        state = verify_pairs_flow(run=args.run, k=args.k, seed=seed, budget=args.prompt_budget,
                                  max_tokens=args.max_tokens, llm=llm, return_state=True)
    else:
        state = synthesize_flow(run=args.run, inputs=args.input, source=args.source, budget=args.budget, k=args.k,
                                seed=seed, prompt_budget=args.prompt_budget, max_tokens=args.max_tokens, llm=llm,
                                return_state=True)
    return exit_code(state)


if __name__ == "__main__":
    sys.exit(main())
