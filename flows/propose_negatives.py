"""The ``propose-negatives`` Prefect flow: mine grounded negatives for a run.

    python -m flows.propose_negatives --run RUN [--budget 10000 --seed 42 --axes spatial,temporal --no-graph \
        --prefer-same-op]

One task (the rules run per step, then fill values are completed in one batch through the LLM
layer, whose cache makes a retried or resumed run free). The logic lives in ``proposals.mine``.
"""

from __future__ import annotations

import argparse
import sys

from prefect import flow, task

from proposals.mine import MineConfig, format_audit, mine
from proposals.rules import Params
from data.schema import AXES


@task(name="mine-candidates", retries=1, retry_delay_seconds=2)
def mine_candidates(run: str, budget: int, seed: int, axes: list[str], no_graph: bool,
                    prefer_same_op: bool = False) -> dict:
    stats = mine(run, MineConfig(budget=budget, seed=seed, axes=tuple(axes), no_graph=no_graph,
                                 params=Params(prefer_same_op=prefer_same_op)))
    print(format_audit(stats))
    return stats.as_dict()


@flow(name="propose-negatives", log_prints=True)
def propose_negatives_flow(run: str, budget: int = 10000, seed: int = 42, axes: list[str] | None = None,
                           no_graph: bool = False, prefer_same_op: bool = False) -> dict:
    """Mine the candidate pool and the seeded sample of a run directory (``prefer_same_op``: rank
    candidates taking the positive's op first; off as in the paper)."""
    return mine_candidates(run, budget, seed, list(axes or AXES), no_graph, prefer_same_op)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.propose_negatives")
    ap.add_argument("--run", required=True)
    ap.add_argument("--budget", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--axes", default=",".join(AXES))
    ap.add_argument("--no-graph", action="store_true")
    ap.add_argument("--prefer-same-op", action="store_true")
    args = ap.parse_args(argv)
    propose_negatives_flow(run=args.run, budget=args.budget, seed=args.seed,
                           axes=[a for a in args.axes.split(",") if a], no_graph=args.no_graph,
                           prefer_same_op=args.prefer_same_op)
    return 0


if __name__ == "__main__":
    sys.exit(main())
