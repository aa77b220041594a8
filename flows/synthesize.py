"""The ``verify-pairs`` and ``synthesize`` Prefect flows.

    python -m flows.synthesize --run RUN [--sample-size 60 --k 5 --base-url URL --model M]   # the whole chain
    python -m flows.synthesize --run RUN --verify-only [--k 5 ...]                          # verify + export

``synthesize`` chains ingest -> ``build-graphs`` -> ``propose-negatives`` -> ``verify-pairs``;
``verify-pairs`` verifies the sampled pairs with the teacher, then writes the TRL and
WebPRMBench exports, the dataset card and the report. Pairs left pending by an outage make the
verification task fail after writing what was decided, so Prefect retries it; the LLM cache makes
the retry send only what is missing. The flows take the stages' own dataclasses (``mine``:
``MineConfig``, ``verify``: ``VerifyConfig``, ``llm``: the teacher's ``LLMConfig``, default the
embedded model), and the command takes their flags (``data.config``), so both have the stages'
defaults. The logic lives in ``data.ingest``, ``teacher.verify`` and ``dataset.export``, whose
functions the tasks call as the CLIs do (the same one-line errors and exit codes:
``flows.common``); this module only wires them. The verification summary and the run's report
(``RUN/report/README.md``) are posted as markdown artifacts, shown in the Prefect UI under the
flow run's Artifacts.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow, task

from data.config import Configurable, make_parser
from data.ingest import READERS, ingest
from data.rundir import RunDir
from dataset.export import FORMATS, export
from flows.build_graphs import build_graphs_flow
from flows.common import (PENDING, StageError, cli_flow, exit_code, post_markdown, retry_unless_refused,
                          stage_task, unwrap)
from flows.propose_negatives import propose_negatives_flow
from llm import LLMConfig
from proposals.mine import MineConfig
from teacher.replay import ReplayConfig
from teacher.verify import VerifyConfig, done_summary, format_summary, verify

BUNDLED = str(Path(__file__).resolve().parents[1] / "data" / "bundled" / "agentlab_workarena.parquet")


@dataclass
class SynthesizeCommand(Configurable):
    """What ``python -m flows.synthesize`` runs (the stages' settings are their own dataclasses)."""

    ARG_GROUP = "command"

    run: str = field(metadata={"help": "run directory to write"})
    verify_only: bool = field(default=False, metadata={"help": "only the verify-pairs flow (candidates exist)"})
    source: str = field(default="canonical", metadata={"choices": sorted(READERS),
                                                       "help": "the inputs' format, as data.ingest --source"})
    input: list[str] | None = field(default=None, metadata={
        "metavar": "PATH", "help": "files or folders to ingest (default: the bundled AgentLab sample)"})


@task(name="ingest", retries=1, retry_condition_fn=retry_unless_refused)
@stage_task(refused=(FileNotFoundError, ValueError))        # as data.ingest's CLI
def ingest_task(source: str, inputs: list[str], run: str) -> dict:
    stats = ingest(source, inputs, run)
    print(stats.summary())
    print(f"wrote {RunDir(run).trajectories}")
    if stats.n_out == 0:               # as data.ingest: exit code 1
        raise StageError("nothing could be ingested; see rejects.jsonl", code=1)
    return stats.as_dict()


@task(name="verify-sampled-pairs", retries=2, retry_delay_seconds=30, retry_condition_fn=retry_unless_refused)
@stage_task
def verify_task(run: str, config: VerifyConfig, llm: LLMConfig, replay: ReplayConfig | None = None) -> dict:
    stats = verify(run, config, llm, progress=True, replay_config=replay)
    text = format_summary(stats) + "\n" + done_summary(stats, run)
    print(text)
    post_markdown("verify-pairs-summary", "```\n" + text + "\n```", f"teacher.verify of {run}")
    if stats.extra["pending"]:         # retried (the LLM cache answers what was decided); as the CLI: code 3
        raise StageError(f"{stats.extra['pending']} pairs pending after infrastructure failures "
                         f"{stats.extra['pending_errors']}: rerun to resume them", code=PENDING)
    return stats.as_dict()


@task(name="export", retries=1, retry_condition_fn=retry_unless_refused)
@stage_task
def export_task(run: str, fmt: str, seed: int | None, card: bool) -> list[str]:
    return [str(p) for p in export(run, fmt, card=card, **({} if seed is None else {"seed": seed}))]


def post_report(run: str) -> None:
    """The run's report (``dataset.report``: ``RUN/report/README.md``) as a markdown artifact; its
    figures stay files beside it."""
    report = Path(run) / "report" / "README.md"
    if report.exists():
        post_markdown("synthesis-report", report.read_text(encoding="utf-8"), f"report of {run} (figures in {report.parent})")


@flow(name="verify-pairs", log_prints=True)
@cli_flow
def verify_pairs_flow(run: str, config: VerifyConfig | None = None, llm: LLMConfig | None = None,
                      split_seed: int | None = None, replay: ReplayConfig | None = None) -> dict:
    """Verify a run's sampled pairs (``config``: ``teacher.verify``'s settings; ``llm``: the
    teacher, default the embedded model; ``replay``: the replay verifier's settings when
    ``config.verifier`` is ``replay``), then export (TRL, WebPRMBench; ``split_seed``: the export's
    ``--seed``), card and report."""
    stats = unwrap(verify_task(run, config or VerifyConfig(), llm or LLMConfig(), replay, return_state=True))
    written = []
    for i, fmt in enumerate(FORMATS):
        written += unwrap(export_task(run, fmt, split_seed, card=i == len(FORMATS) - 1, return_state=True))
    for path in written:
        print(f"wrote {path}")
    post_report(run)
    return stats


@flow(name="synthesize", log_prints=True)
@cli_flow
def synthesize_flow(run: str = "runs/demo", inputs: list[str] | None = None, source: str = SynthesizeCommand.source,
                    mine: MineConfig | None = None, verify: VerifyConfig | None = None,
                    llm: LLMConfig | None = None, fill_llm: LLMConfig | None = None,
                    replay: ReplayConfig | None = None) -> dict:
    """Trajectories to a preference dataset: ingest (``source``, ``inputs``; default the bundled
    AgentLab sample), graphs, negatives (``mine``, fill values by ``fill_llm``), verification
    (``verify``, teacher ``llm``), exports; both models default to the embedded one."""
    unwrap(ingest_task(source, inputs or [BUNDLED], run, return_state=True))
    unwrap(build_graphs_flow(run=run, return_state=True))
    unwrap(propose_negatives_flow(run=run, config=mine, fill_llm=fill_llm, return_state=True))
    return unwrap(verify_pairs_flow(run=run, config=verify, llm=llm, replay=replay, return_state=True))


def build_parser():
    """``SynthesizeCommand``, then the stages' flags: ``MineConfig`` (its seed stays the miner's own:
    ``--seed`` is the teacher's) with the fill model under ``--fill-``, ``VerifyConfig``
    (``--prompt-budget`` is an old name of ``--axtree-chars`` here, ``--budget`` of
    ``--sample-size``) and the teacher's ``LLMConfig``."""
    ap = make_parser("python -m flows.synthesize", __doc__)
    SynthesizeCommand.add_args(ap)
    MineConfig.add_args(ap, skip=("seed",))
    LLMConfig.add_args(ap, prefix="fill-")                 # the model that completes fill values
    VerifyConfig.add_args(ap, skip=("budget",))            # --budget is the sample size here, as it always was
    LLMConfig.add_args(ap, skip=("seed", "temperature", "max_tokens"))   # those three come from VerifyConfig
    ReplayConfig.add_args(ap, prefix="replay-")           # --verifier replay, as teacher.verify
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd, verify_config, llm = SynthesizeCommand.from_args(args), VerifyConfig.from_args(args), LLMConfig.from_args(args)
    replay = ReplayConfig.from_args(args, prefix="replay-")
    if cmd.verify_only:
        state = verify_pairs_flow(run=cmd.run, config=verify_config, llm=llm, replay=replay, return_state=True)
    else:
        state = synthesize_flow(run=cmd.run, inputs=cmd.input, source=cmd.source, mine=MineConfig.from_args(args),
                                verify=verify_config, llm=llm, fill_llm=LLMConfig.from_args(args, prefix="fill-"),
                                replay=replay, return_state=True)
    return exit_code(state)


if __name__ == "__main__":
    sys.exit(main())
