"""The ``propose-negatives`` Prefect flow: mine grounded negatives for a run.

    python -m flows.propose_negatives --run RUN [--sample-size 10000 --seed 42 --axes spatial,temporal --no-graph \
        --max-per-rule 3 --near-hops 2 --prefer-same-op --fill-model FOLDER --fill-base-url URL ...]

One task (the rules run per step, then fill values are completed in one batch through the LLM
layer, whose cache makes a retried or resumed run free) that calls ``proposals.mine.mine`` as the
CLI does: the same flags (``proposals.mine.build_parser``: ``MineCommand``, ``MineConfig`` and the
fill model's ``LLMConfig`` under ``--fill-``), the same one-line errors (``flows.common``), the same files; the
summary is posted as a markdown artifact. The logic lives in ``proposals.mine``.
"""

from __future__ import annotations

import sys

from prefect import flow, task

from flows.common import cli_flow, exit_code, post_markdown, retry_unless_refused, stage_task, unwrap
from llm import LLMConfig
from proposals.mine import MineCommand, MineConfig, done_summary, format_audit, mine
from proposals.mine import build_parser as mine_parser


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


def build_parser():
    """``proposals.mine``'s own flags (one parser for both commands)."""
    return mine_parser("python -m flows.propose_negatives", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = MineCommand.from_args(args)
    state = propose_negatives_flow(run=cmd.run, config=MineConfig.from_args(args),
                                   fill_llm=LLMConfig.from_args(args, prefix="fill-"), workers=cmd.workers,
                                   progress=not cmd.quiet, return_state=True)
    code = exit_code(state)
    return code if code or state.result()["out"] else 1       # as proposals.mine: an empty pool is a failure


if __name__ == "__main__":
    sys.exit(main())
