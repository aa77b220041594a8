"""The ``propose-negatives`` Prefect flow: mine grounded negatives for a run.

    python -m flows.propose_negatives --run RUN [--budget 10000 --seed 42 --axes spatial,temporal --no-graph \
        --prefer-same-op]

One task (the rules run per step, then fill values are completed in one batch through the LLM
layer, whose cache makes a retried or resumed run free) that calls ``proposals.mine.mine`` as the
CLI does: the same one-line errors (``flows.common``), the same files; the summary is posted as a
markdown artifact. The logic lives in ``proposals.mine``.
"""

from __future__ import annotations

import sys

from prefect import flow, task

from data.config import make_parser
from flows.common import cli_flow, exit_code, post_markdown, retry_unless_refused, stage_task, unwrap
from proposals.mine import MineConfig, done_summary, format_audit, mine
from proposals.rules import Params
from data.schema import AXES


@task(name="mine-candidates", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_refused)
@stage_task
def mine_candidates(run: str, budget: int, seed: int, axes: list[str], no_graph: bool,
                    prefer_same_op: bool = False) -> dict:
    stats = mine(run, MineConfig(budget=budget, seed=seed, axes=tuple(axes), no_graph=no_graph,
                                 params=Params(prefer_same_op=prefer_same_op)))
    text = format_audit(stats) + "\n" + done_summary(stats, run)
    print(text)
    post_markdown("propose-negatives-summary", "```\n" + text + "\n```", f"proposals.mine of {run}")
    return stats.as_dict()


@flow(name="propose-negatives", log_prints=True)
@cli_flow
def propose_negatives_flow(run: str, budget: int = 10000, seed: int = 42, axes: list[str] | None = None,
                           no_graph: bool = False, prefer_same_op: bool = False) -> dict:
    """Mine the candidate pool and the seeded sample of a run directory (``prefer_same_op``: rank
    candidates taking the positive's op first; off as in the paper)."""
    return unwrap(mine_candidates(run, budget, seed, list(axes or AXES), no_graph, prefer_same_op,
                                  return_state=True))


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("python -m flows.propose_negatives", __doc__)
    ap.add_argument("--run", required=True)
    ap.add_argument("--budget", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--axes", default=",".join(AXES))
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--prefer-same-op", action="store_true")
    args = ap.parse_args(argv)
    state = propose_negatives_flow(run=args.run, budget=args.budget, seed=args.seed,
                                   axes=[a for a in args.axes.split(",") if a], no_graph=args.no_graph,
                                   prefer_same_op=args.prefer_same_op, return_state=True)
    code = exit_code(state)
    return code if code or state.result()["out"] else 1       # as proposals.mine: an empty pool is a failure


if __name__ == "__main__":
    sys.exit(main())
