"""Propose grounded, minimally contrastive negatives for every demonstrated step.

    python -m proposals.mine --run RUN [--sample-size 10000 --seed 42 --axes spatial,temporal,spatiotemporal --no-graph
                                        --pool-gmcp-ratio R --selection sample|rank --max-per-rule 3 --prefer-same-op
                                        --no-fill]

Reads ``RUN/trajectories.parquet`` and the graphs of ``graph.build`` (with the step-to-node
mapping it wrote; observations it rejected are not mined: ``steps`` in stats.json). Each rule's
candidates are grounded (the element resolves to exactly one enabled bid of O_t, the negative differs
from the positive and from what an earlier rule proposed at this step, it has a value) in the order of
a seeded draw from the rule's distribution q_G (``--selection sample``, the default: the paper's
``a- ~ q_G``) or of its own ranking (``rank``), and the first ``--max-per-rule`` grounded ones are kept
(0: all; a failed fill's slot goes to the rule's next draw); what grounding removes is counted per rule
and reason (``rules`` in stats.json). Writes the full pool to ``RUN/candidates.parquet`` (``rules``: every
rule that drew a negative) with ``sampled`` marking the seeded sample of ``--sample-size`` rows the
teacher will verify, then audits that file with ``proposals.audit`` (re-derived from the files:
``RUN/audit/candidates.json``, copied into the ``proposals.mine`` entry of ``stats.json`` with
the drops by reason) and writes the dropped proposals to ``rejects.jsonl``. ``--no-graph`` mines from
the local observation and trajectory only (the paper's No-Graph ablation); ``--axes`` builds
single-axis variants; ``--pool-gmcp-ratio R`` drops candidates (seeded) until the pool's GMCP share is R
(the paper's No-Graph ablation at matched GMCP ratios, Table 6). Same inputs, seed and LLM cache:
byte-identical output. The work is split by job: ``proposals.grounding`` (the rules and grounding,
its records in ``proposals.pending``), ``proposals.fill`` (LLM fill values), ``proposals.pool`` (the
process fan-out and the files).
"""


from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cli.config import Configurable, make_parser
from cli.errors import error_exit
from cli.progress import done_line
from data.loss import loss_line
from data.rundir import RunDir, StageStats
from proposals.audit import format_audit as format_table_audit
from proposals.config import STAGE, MineConfig, parse_axes
from proposals.fill import complete_fills
from proposals.gmcp_ratio import GmcpRatioError
from proposals.grounding import Miner, Pending, load_rows
from proposals.pool import (
    candidate_row,
    in_trajectory_order,
    mine,
    mine_chunk,
    open_run,
    plan_chunks,
    plan_trajectories,
    write_chunks,
    write_pool,
)

# The stage's public names, importable from here as before the split by job (grounding, fill, pool).
__all__ = ["STAGE", "MineConfig", "parse_axes", "Miner", "Pending", "load_rows", "complete_fills", "candidate_row",
           "in_trajectory_order", "mine", "mine_chunk", "open_run", "plan_chunks", "plan_trajectories",
           "write_chunks", "write_pool", "format_audit", "done_summary", "MineCommand",
           "build_parser", "main", "loss_summary"]


def format_audit(stats: StageStats) -> str:
    """The stage summary and its audit, as text."""
    lines = [stats.summary(), format_table_audit(stats.extra["audit"])]
    w = stats.extra.get("webprm_rejected_audit")
    if w:
        lines.append(f"WebPRM rejected actions on the same steps: {w['pairs']} pairs, GMCP {w['gmcp_ratio']:.2%}, "
                     f"hallucinated {w['hallucinated_targets']}")
    return "\n".join(lines)


def loss_summary(stats: StageStats) -> str | None:
    """No silent zeros (``data.loss``): when the pool is empty or holds fewer candidates than half the
    steps mined from, one line saying where the steps went, by reason: not mined
    (``steps.rejected``) or mined without a candidate (``without_candidates``)."""
    e = stats.extra
    reasons = Counter(e["steps"]["rejected"]) + Counter(e["without_candidates"]["steps"])
    ops = ", ".join(f"{op}() x{n}" for op, n in e["without_candidates"]["virtual_positive_ops"].items())
    why = {**LOSS_WHY, "virtual_positive": f"{LOSS_WHY['virtual_positive']}: {ops}"}
    return loss_line(STAGE, e["steps"]["in"], stats.n_out, reasons, "steps of successful trajectories", "candidates",
                     why=why)


# A few words after a loss reason: what it means for the user.
LOSS_WHY = {"virtual_positive": "the demonstrated action targets no element, so no rule has one to contrast",
            "no_candidate": "no rule found an element to propose",
            "all_dropped": "grounding or the value checks removed every candidate (rejects.jsonl)",
            "action_failed": "the recorded action raised an error",
            "positive_not_in_observation": "the demonstrated target is not in the observation"}


def done_summary(stats: StageStats, run_dir: str | Path) -> str:
    """The command's last line: the pool, the sample, the time, the file written."""
    e = stats.extra
    sampled = e["audit"]["sample"]["pairs"]
    return done_line(STAGE, f"{stats.n_out} candidates ({sampled} sampled for the teacher) from "
                            f"{e['steps']['out']} steps", e["seconds"], f"wrote {RunDir(run_dir).candidates}")


@dataclass
class MineCommand(Configurable):
    """What ``python -m proposals.mine`` (and the ``propose-negatives`` flow) runs on and how it
    shows progress; the mining itself is :class:`MineConfig`."""

    ARG_GROUP = "command"

    run: str = field(metadata={"help": "run directory holding trajectories.parquet and the graphs"})
    workers: int | None = field(default=None, metadata={"min": 1, "help": "processes (default: one per core)"})
    quiet: bool = field(default=False, metadata={"help": "no progress bars"})


def build_parser(prog: str = "python -m proposals.mine", doc: str = __doc__):
    """The command's flags (``cli.config``): ``MineCommand``, ``MineConfig`` with the rules'
    ``Params`` (``--sample-size``, ``--seed``, ``--axes``, ``--near-hops``, ...) and the fill
    model's ``LLMConfig`` under ``--fill-``."""
    from llm import LLMConfig

    ap = make_parser(prog, doc)
    MineCommand.add_args(ap)
    MineConfig.add_args(ap)
    LLMConfig.add_args(ap, prefix="fill-")   # the model that completes fill values
    # The issue's and Table 6's name for the pool's share, on this command alone: the synthesize flow,
    # which merges mining's and the export's flags, keeps --pool-gmcp-ratio apart from the export's.
    pool = next(a for a in ap._actions if "--pool-gmcp-ratio" in a.option_strings)
    ap.add_argument("--gmcp-ratio", dest=pool.dest, type=pool.type, metavar="R", default=argparse.SUPPRESS,
                    help="the same as --pool-gmcp-ratio")
    return ap


def main(argv: list[str] | None = None) -> int:
    from llm import LLMConfig

    args = build_parser().parse_args(argv)
    cmd = MineCommand.from_args(args)
    try:
        stats = mine(cmd.run, MineConfig.from_args(args), LLMConfig.from_args(args, prefix="fill-"),
                     workers=cmd.workers, show_progress=not cmd.quiet)
    except (FileNotFoundError, GmcpRatioError) as e:
        return error_exit(e)
    print(format_audit(stats))
    if (line := loss_summary(stats)):
        print(line)
    print(done_summary(stats, cmd.run))
    return 0 if stats.n_out else 1


if __name__ == "__main__":
    sys.exit(main())
