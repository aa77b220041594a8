"""The ``verify-pairs`` and ``synthesize`` Prefect flows.

    python -m flows.synthesize --run RUN [--sample-size 60 --k 5 --base-url URL --model M]   # the whole chain
    python -m flows.synthesize --run RUN --verify-only [--k 5 ...]                          # verify + export
    python -m flows.synthesize --run RUN ... [--dask-address tcp://host:8786 | --dask-local --dask-workers N]

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

On Dask (``flows.common.DaskConfig``; ``--dask-local`` starts one local cluster for the whole
command) the graphs are built per site and the negatives mined per site on the cluster's workers
(``flows.build_graphs``, ``flows.propose_negatives``), and the sampled pairs are verified in
shards (two per worker thread), each a ``verify-shard`` task (``teacher.verify.verify_shard``) with
its share of the teacher's ``--concurrency`` (so the endpoint sees no more requests in flight than
in one process) and the same LLM cache folder. A pair's order coin and requests come from the pair,
so this process merges the shards' decisions into the same files as a one-process run
(``teacher.verify.write_verification``). A shard that fails, or leaves pairs pending after an
outage, is retried (``SHARD_RETRIES``), and the cache answers every call an earlier try got.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run

from data.config import Configurable, make_parser
from data.ingest import READERS, ingest
from data.rundir import RunDir
from dataset.export import FORMATS, export
from flows.build_graphs import build_graphs_flow
from flows.common import (PENDING, DaskConfig, StageError, cli_flow, dask_scheduler, dask_threads, exit_code,
                          final_state, on_dask, post_markdown, retry_unless_refused, stage_task, unwrap)
from flows.propose_negatives import propose_negatives_flow
from llm import LLMConfig
from proposals.mine import MineConfig
from teacher.replay import ReplayConfig
from teacher.verify import (VerifyConfig, done_summary, format_summary, merge_shards, open_pairs, verify, verify_shard,
                            write_verification)

SHARD_RETRIES = 2           # a verify shard's retries (after a failure, or pairs left pending by an outage)
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
    return _report_verified(verify(run, config, llm, progress=True, replay_config=replay), run)


def _report_verified(stats, run: str) -> dict:
    """Print and post the summary; pairs still pending fail with the CLI's code 3."""
    text = format_summary(stats) + "\n" + done_summary(stats, run)
    print(text)
    post_markdown("verify-pairs-summary", "```\n" + text + "\n```", f"teacher.verify of {run}")
    if stats.extra["pending"]:         # retried (the LLM cache answers what was decided); as the CLI: code 3
        raise StageError(f"{stats.extra['pending']} pairs pending after infrastructure failures "
                         f"{stats.extra['pending_errors']}: rerun to resume them", code=PENDING)
    return stats.as_dict()


@task(name="verify-shard", retries=SHARD_RETRIES, retry_delay_seconds=5, retry_condition_fn=retry_unless_refused,
      cache_policy=NO_CACHE)
@stage_task
def verify_shard_task(run: str, config: VerifyConfig, llm: LLMConfig, pair_ids: list[str]) -> tuple:
    """One shard of the sampled pairs (``teacher.verify.verify_shard``); pairs left pending by an
    outage fail the try, so it is retried, except the last try, whose pending pairs are written as pending."""
    decisions, usage = verify_shard(run, config, llm, pair_ids)
    pending = sum(d.status == "pending" for d in decisions)
    if pending and task_run.run_count <= SHARD_RETRIES:
        raise StageError(f"{pending} pairs of the shard pending after infrastructure failures", code=PENDING)
    return decisions, usage


def verify_in_shards(run: str, config: VerifyConfig, llm: LLMConfig, shards: int) -> dict:
    """The sampled pairs in ``shards`` contiguous shards of pair ids, each a ``verify-shard`` task
    with the teacher's concurrency split between the ``shards / 2`` worker threads (two shards per
    thread, run in turn); the outputs written here, as one process writes them."""
    rundir, pairs, t0 = open_pairs(run, config)     # the CLI's checks and the stage lock, held by this process
    ids = [p.row["pair_id"] for p in pairs]
    n = max(min(shards, len(ids)), 1)
    parts = [ids[i * len(ids) // n:(i + 1) * len(ids) // n] for i in range(n)]
    llm = replace(llm, cache_dir=str(Path(llm.cache_dir).resolve())).validate()    # one cache, whatever a worker's cwd
    shard_llm = replace(llm, concurrency=max(llm.concurrency // max(shards // 2, 1), 1))
    futures = [verify_shard_task.submit(str(rundir.root.resolve()), config, shard_llm, part) for part in parts if part]
    decisions, usage = merge_shards(pairs, [unwrap(final_state(f)) for f in futures])
    return _report_verified(write_verification(rundir, pairs, decisions, config, llm, usage, t0), run)


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
                      split_seed: int | None = None, replay: ReplayConfig | None = None, shards: int = 0) -> dict:
    """Verify a run's sampled pairs (``config``: ``teacher.verify``'s settings; ``llm``: the
    teacher, default the embedded model; ``replay``: the replay verifier's settings when
    ``config.verifier`` is ``replay``), then export (TRL, WebPRMBench; ``split_seed``: the export's
    ``--seed``), card and report. ``shards`` > 0: the teacher's pairs in that many ``verify-shard``
    tasks on the flow's task runner (Dask); 0: one task, as the CLI (so is the replay verifier)."""
    config = config or VerifyConfig()
    if shards and config.verifier == "llm":
        stats = verify_in_shards(run, config, llm or LLMConfig(), shards)
    else:
        stats = unwrap(verify_task(run, config, llm or LLMConfig(), replay, return_state=True))
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
                    replay: ReplayConfig | None = None, dask_address: str | None = None) -> dict:
    """Trajectories to a preference dataset: ingest (``source``, ``inputs``; default the bundled
    AgentLab sample), graphs, negatives (``mine``, fill values by ``fill_llm``), verification
    (``verify``, teacher ``llm``), exports; both models default to the embedded one.
    ``dask_address``: the graphs, the mining and the verification on that Dask scheduler."""
    unwrap(ingest_task(source, inputs or [BUNDLED], run, return_state=True))
    unwrap(on_dask(build_graphs_flow, dask_address)(run=run, return_state=True))
    unwrap(on_dask(propose_negatives_flow, dask_address)(run=run, config=mine, fill_llm=fill_llm,
                                                         by_site=dask_address is not None, return_state=True))
    return unwrap(on_dask(verify_pairs_flow, dask_address)(run=run, config=verify, llm=llm, replay=replay,
                                                           shards=verify_shards(dask_address), return_state=True))


def verify_shards(address: str | None) -> int:
    """Two shards per worker thread of the cluster at ``address`` (None: 0, one task)."""
    return 2 * dask_threads(address) if address else 0


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
    DaskConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd, verify_config, llm = SynthesizeCommand.from_args(args), VerifyConfig.from_args(args), LLMConfig.from_args(args)
    replay = ReplayConfig.from_args(args, prefix="replay-")
    with dask_scheduler(DaskConfig.from_args(args)) as address:
        if cmd.verify_only:
            state = on_dask(verify_pairs_flow, address)(run=cmd.run, config=verify_config, llm=llm, replay=replay,
                                                        shards=verify_shards(address), return_state=True)
        else:
            state = synthesize_flow(run=cmd.run, inputs=cmd.input, source=cmd.source, mine=MineConfig.from_args(args),
                                    verify=verify_config, llm=llm, fill_llm=LLMConfig.from_args(args, prefix="fill-"),
                                    replay=replay, dask_address=address, return_state=True)
    return exit_code(state)


if __name__ == "__main__":
    sys.exit(main())
