"""The ``propose-negatives`` Prefect flow: mine grounded negatives for a run.

    python -m flows.propose_negatives --run RUN [--budget 10000 --seed 42 --axes spatial,temporal --no-graph \
        --max-per-rule 3 --near-hops 2 --prefer-same-op --fill-model FOLDER --fill-base-url URL ...]

One task (the rules run per step, then fill values are completed in one batch through the LLM
layer, whose cache makes a retried or resumed run free) that calls ``proposals.mine.mine`` as the
CLI does: the same flags (``proposals.mine.MineConfig`` and the fill model's ``LLMConfig`` under
``--fill-``, from one place), the same one-line errors (``flows.common``), the same files; the
summary is posted as a markdown artifact. The logic lives in ``proposals.mine``.
"""

from __future__ import annotations

import argparse
import sys

from prefect import flow, task

from data.config import make_parser
from flows.common import cli_flow, exit_code, post_markdown, retry_unless_refused, stage_task, unwrap
from llm import LLMConfig
from proposals.mine import MineConfig, done_summary, format_audit, mine


@task(name="mine-candidates", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_refused)
@stage_task
def mine_candidates(run: str, config: MineConfig, fill_llm: LLMConfig | None, workers: int | None = None,
                    progress: bool = True) -> dict:
    stats = mine(run, config, fill_llm, workers=workers, show_progress=progress)
    text = format_audit(stats) + "\n" + done_summary(stats, run)
    print(text)
    post_markdown("propose-negatives-summary", "```\n" + text + "\n```", f"proposals.mine of {run}")
    return stats.as_dict()


@flow(name="propose-negatives", log_prints=True)
@cli_flow
def propose_negatives_flow(run: str, config: MineConfig | None = None, fill_llm: LLMConfig | None = None,
                           workers: int | None = None, progress: bool = True) -> dict:
    """Mine the candidate pool and the seeded sample of a run directory. ``config``: how
    (``proposals.mine``'s flags as fields, the rules' ``params`` nested); ``fill_llm``: the model
    that completes fill values (default: ``LLMConfig()``, the embedded model); ``workers``:
    processes (default: one per core); ``progress``: bars on stderr."""
    return unwrap(mine_candidates(run, config or MineConfig(), fill_llm, workers, progress, return_state=True))


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("python -m flows.propose_negatives", __doc__)
    ap.add_argument("--run", required=True)
    ap.add_argument("--workers", type=int, default=None, help="processes (default: one per core)")
    ap.add_argument("--quiet", action=argparse.BooleanOptionalAction, default=False, help="no progress bars")
    MineConfig.add_args(ap)                  # proposals.mine's flags: --budget, --axes, --near-hops, ...
    LLMConfig.add_args(ap, prefix="fill-")   # the model that completes fill values
    args = ap.parse_args(argv)
    state = propose_negatives_flow(run=args.run, config=MineConfig.from_args(args),
                                   fill_llm=LLMConfig.from_args(args, prefix="fill-"), workers=args.workers,
                                   progress=not args.quiet, return_state=True)
    code = exit_code(state)
    return code if code or state.result()["out"] else 1       # as proposals.mine: an empty pool is a failure


if __name__ == "__main__":
    sys.exit(main())
