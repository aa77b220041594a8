"""The ``verify-pairs`` and ``synthesize`` Prefect flows.

    python -m flows.synthesize --config configs/pipeline.yaml [--run RUN ...]                # one file for the job
    python -m flows.synthesize --run RUN --source agentlab --input PATH [--base-url URL --model M --sample-size 60]
    python -m flows.synthesize --run RUN --verify-only [--k 5 ...]                          # verify + export
    python -m flows.synthesize --run RUN ... [--dask-address tcp://host:8786 | --dask-local --dask-workers N]

**One pipeline file** (``--config``, ``configs/pipeline.yaml``; a deployment's ``config`` parameter): the
command's own keys (``run``, ``source``, ``input``) and one section per stage (``mine``, ``verify``,
``replay``, ``export``, ``dask``), each the stage's dataclass. ``llm`` is the one model both the fill
values and the teacher use; ``fill_llm`` and ``teacher_llm`` override it for one of them. On the
command line likewise: ``--base-url``/``--model``/... set the model of both, ``--fill-*`` the fill
model's. Flags override the file (a stage's own ``--llm-config`` file sits between the two).

``synthesize`` chains ingest -> ``build-graphs`` -> ``propose-negatives`` -> ``verify-pairs``;
``verify-pairs`` verifies the sampled pairs with the teacher, then writes the TRL and
WebPRMBench exports, the dataset card and the report. Pairs left pending by an outage make the
verification task fail after writing what was decided, so Prefect retries it; the LLM cache makes
the retry send only what is missing. The flows take the stages' own dataclasses (``mine``:
``MineConfig``, ``verify``: ``VerifyConfig``, ``llm``: the teacher's ``LLMConfig``, default the
embedded model), and the command takes their flags (``cli.config``), so both have the stages'
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
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.runtime import task_run

from cli.config import Configurable, build, check_keys, given, make_parser, merge, read_yaml
from cli.errors import error_exit
from data.ingest import READERS, ingest
from data.loss import stage_loss_line
from data.rundir import RunDir
from dataset.export import FORMATS, ExportOptions, export, loss_line_of
from flows.build_graphs import build_graphs_flow
from flows.common import (
    PENDING,
    DaskConfig,
    StageError,
    cli_flow,
    dask_gave_up,
    dask_scheduler,
    dask_threads,
    exit_code,
    final_state,
    on_dask,
    post_markdown,
    retry_unless_refused,
    stage_task,
    unwrap,
)
from flows.propose_negatives import propose_negatives_flow
from judgment.format import JudgmentFormat
from llm import LLMConfig
from proposals.mine import MineConfig
from teacher.replay import ReplayConfig
from teacher.verify import (
    VerifyConfig,
    done_summary,
    format_summary,
    merge_shards,
    open_pairs,
    verify,
    verify_shard,
    write_verification,
)

SHARD_RETRIES = 2           # a verify shard's retries (after a failure, or pairs left pending by an outage)
BUNDLED = str(Path(__file__).resolve().parents[1] / "data" / "bundled" / "agentlab_workarena.parquet")


@dataclass
class SynthesizeCommand(Configurable):
    """What ``python -m flows.synthesize`` runs (the stages' settings are their own dataclasses)."""

    ARG_GROUP = "command"

    config: str | None = field(default=None, metadata={
        "metavar": "FILE", "help": "pipeline YAML: run, source, input and the sections llm, fill_llm, teacher_llm, "
                                   "mine, verify, replay, export, dask (flags override it; configs/pipeline.yaml)"})
    run: str | None = field(default=None, metadata={"help": "run directory to write (or run: in --config)"})
    verify_only: bool = field(default=False, metadata={"help": "only the verify-pairs flow (candidates exist)"})
    source: str = field(default="canonical", metadata={"choices": sorted(READERS),
                                                       "help": "the inputs' format, as data.ingest --source"})
    input: list[str] | None = field(default=None, metadata={
        "metavar": "PATH", "help": "files or folders to ingest (default: the bundled AgentLab sample)"})


# The pipeline file's sections: each a stage's settings, with the flags' prefix of the command.
SECTIONS = {"mine": (MineConfig, ""), "verify": (VerifyConfig, ""), "replay": (ReplayConfig, "replay-"),
            "export": (ExportOptions, ""), "dask": (DaskConfig, ""),
            "llm": (LLMConfig, ""), "teacher_llm": (LLMConfig, ""), "fill_llm": (LLMConfig, "fill-"),
            "replay_policy_llm": (LLMConfig, "replay-policy-")}
MODELS = ("llm", "teacher_llm", "fill_llm")          # the shared model and its two overrides
TEACHER_OWN = ("seed", "temperature", "max_tokens")    # the teacher's come from VerifyConfig (--seed, ...)


@dataclass
class Pipeline:
    """Every setting of one synthesis job: the command's and each stage's (``pipeline_settings``)."""

    command: SynthesizeCommand
    mine: MineConfig
    verify: VerifyConfig
    teacher_llm: LLMConfig
    fill_llm: LLMConfig
    replay: ReplayConfig
    replay_policy_llm: LLMConfig
    export: ExportOptions
    dask: DaskConfig


def read_pipeline(path: str | Path) -> dict:
    """A pipeline file's mapping, its top-level keys and sections checked (one-line ``ValueError``)."""
    data = read_yaml(path)
    check_keys(data, [f.name for f in fields(SynthesizeCommand) if f.name != "config"] + list(SECTIONS), str(path))
    for name in SECTIONS:
        if not isinstance(data.get(name) or {}, dict):
            raise ValueError(f"{path}: {name} must be a mapping of settings, not {type(data[name]).__name__}")
    return data


def _settings(cls, args, prefix: str, base: dict, where: str):
    """``cls``'s settings: its defaults, ``base`` (from the pipeline file), its own ``FILE_FLAG``
    file, then the flags given (``args`` None: the file alone)."""
    values = cls.file_values(base, where)
    if args is not None:
        if (path := cls.file_path(args, prefix)):
            values = merge(values, cls.file_values(read_yaml(path), path))
        values = merge(values, given(args, cls, prefix))
    config = build(cls, values, where)
    return config.validate() if isinstance(config, LLMConfig) else config


def pipeline_settings(path: str | None, args=None) -> Pipeline:
    """The job's settings from the pipeline file at ``path`` (None: none) under the flags ``args``.
    ``llm`` is both models' section; ``teacher_llm`` and ``fill_llm`` override it for one. The flags
    of the shared model (``--base-url``, ``--llm-config``, ...) set the fill model too, under its own
    ``--fill-*`` ones (``--seed``, ``--temperature`` and ``--max-tokens`` are the teacher's alone)."""
    file = read_pipeline(path) if path else {}
    where = str(path or "flags")
    section = {name: file.get(name) or {} for name in SECTIONS}
    command = {k: v for k, v in file.items() if k not in SECTIONS}
    shared = merge(section["llm"], section["fill_llm"])
    if args is not None:
        if (llm_file := LLMConfig.file_path(args)):
            shared = merge(shared, LLMConfig.file_values(read_yaml(llm_file), llm_file))
        shared = merge(shared, {k: v for k, v in given(args, LLMConfig).items() if k not in TEACHER_OWN})
    stage = {name: _settings(cls, args, prefix, section[name], f"{where}: {name}")
             for name, (cls, prefix) in SECTIONS.items() if name not in MODELS}
    return Pipeline(command=_settings(SynthesizeCommand, args, "", command, where),
                    teacher_llm=_settings(LLMConfig, args, "", merge(section["llm"], section["teacher_llm"]),
                                          f"{where}: teacher_llm"),
                    fill_llm=_settings(LLMConfig, args, "fill-", shared, f"{where}: fill_llm"), **stage)


@task(name="ingest", retries=1, retry_condition_fn=retry_unless_refused)
@stage_task(refused=(FileNotFoundError, ValueError))        # as data.ingest's CLI
def ingest_task(source: str, inputs: list[str], run: str) -> dict:
    stats = ingest(source, inputs, run)
    print(stats.summary())
    if (line := stage_loss_line(stats, "records")):
        print(line)
    print(f"wrote {RunDir(run).trajectories}")
    if stats.n_out == 0:               # as data.ingest: exit code 1
        raise StageError("nothing could be ingested; see rejects.jsonl", code=1)
    return stats.as_dict()


@task(name="verify-sampled-pairs", retries=2, retry_delay_seconds=30, retry_condition_fn=retry_unless_refused)
@stage_task
def verify_task(run: str, config: VerifyConfig, llm: LLMConfig, replay: ReplayConfig | None = None,
                replay_policy: LLMConfig | None = None) -> dict:
    return _report_verified(verify(run, config, llm, progress=True, replay_config=replay,
                                   replay_backend=replay_backend(config, replay, replay_policy)), run)


def replay_backend(config: VerifyConfig, replay: ReplayConfig | None, policy: LLMConfig | None):
    """As teacher.verify's CLI: the MiniWoB backend with the ``--replay-policy-*`` model when the
    replays continue with a policy (default: the embedded model); None (the solvers) otherwise."""
    if config.verifier != "replay" or replay is None or replay.continuation != "policy":
        return None
    from teacher.replay import MiniWoBBackend

    return MiniWoBBackend((policy or LLMConfig()).validate())


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
    number = {id(f): n for n, f in enumerate(futures, 1)}
    for future in as_completed(futures):      # a task Dask gave up on fails the flow at once
        dask_gave_up(future, f"verify-shard {number[id(future)]} of {len(futures)}")
    decisions, usage = merge_shards(pairs, [unwrap(final_state(f)) for f in futures])
    return _report_verified(write_verification(rundir, pairs, decisions, config, llm, usage, t0), run)


@task(name="export", retries=1, retry_condition_fn=retry_unless_refused)
@stage_task
def export_task(run: str, fmt: str, options: ExportOptions, card: bool) -> list[str]:
    """One format as ``dataset.export`` writes it with ``options`` (a pipeline file's ``export`` section)."""
    o = options
    rendered = JudgmentFormat.from_options(o.prompt_template, o.untrusted or "escape") \
        if o.prompt_template or o.untrusted else None
    paths = export(run, fmt, o.seed, o.test_fraction, o.split, card=card, axtree_chars=o.axtree_chars, preset=o.preset,
                   judgment_format=rendered, tokenizer=o.tokenizer, max_length=o.max_length, gmcp_ratio=o.gmcp_ratio)
    if (line := loss_line_of(run, fmt)):
        print(line)
    return [str(p) for p in paths]


@task(name="push-to-hub", retries=2, retry_delay_seconds=30, retry_condition_fn=retry_unless_refused)
@stage_task(refused=(FileNotFoundError, ValueError))        # as dataset.export's CLI
def push_task(run: str, repo_id: str, private: bool) -> str:
    from dataset.hub import push_to_hub

    return push_to_hub(run, repo_id, private)


def post_report(run: str) -> None:
    """The run's report (``dataset.report``: ``RUN/report/README.md``) as a markdown artifact; its
    figures stay files beside it."""
    report = Path(run) / "report" / "README.md"
    if report.exists():
        post_markdown("synthesis-report", report.read_text(encoding="utf-8"),
                      f"report of {run} (figures in {report.parent})")


@flow(name="verify-pairs", log_prints=True)
@cli_flow
def verify_pairs_flow(run: str, config: VerifyConfig | None = None, llm: LLMConfig | None = None,
                      split_seed: int | None = None, replay: ReplayConfig | None = None, shards: int = 0,
                      export: ExportOptions | None = None, replay_policy: LLMConfig | None = None) -> dict:
    """Verify a run's sampled pairs (``config``: ``teacher.verify``'s settings; ``llm``: the
    teacher, default the embedded model; ``replay``: the replay verifier's settings when
    ``config.verifier`` is ``replay``; ``replay_policy``: its ``--replay-policy-*`` model), then
    export (``export``: ``dataset.export``'s settings, its ``format`` default TRL and WebPRMBench;
    ``split_seed``: the export's ``--seed``), card and report (unless ``export.no_card``).
    ``shards`` > 0: the teacher's pairs in that many ``verify-shard`` tasks on the flow's task
    runner (Dask); 0: one task, as the CLI (so is the replay verifier)."""
    config, export = config or VerifyConfig(), export or ExportOptions()
    if split_seed is not None:
        export = replace(export, seed=split_seed)
    if shards and config.verifier == "llm":
        stats = verify_in_shards(run, config, llm or LLMConfig(), shards)
    else:
        stats = unwrap(verify_task(run, config, llm or LLMConfig(), replay, replay_policy, return_state=True))
    written, formats = [], export.format or list(FORMATS)
    for i, fmt in enumerate(formats):
        last = i == len(formats) - 1 and not export.no_card
        written += unwrap(export_task(run, fmt, export, card=last, return_state=True))
    for path in written:
        print(f"wrote {path}")
    if export.push_to_hub:
        print(f"pushed {unwrap(push_task(run, export.push_to_hub, export.hub_private, return_state=True))}")
    post_report(run)
    return stats


@flow(name="synthesize", log_prints=True)
@cli_flow
def synthesize_flow(run: str | None = None, inputs: list[str] | None = None, source: str | None = None,
                    mine: MineConfig | None = None, verify: VerifyConfig | None = None,
                    llm: LLMConfig | None = None, fill_llm: LLMConfig | None = None,
                    replay: ReplayConfig | None = None, dask_address: str | None = None,
                    export: ExportOptions | None = None, replay_policy: LLMConfig | None = None,
                    config: str | None = None) -> dict:
    """Trajectories to a preference dataset: ingest (``source``, ``inputs``; default the bundled
    AgentLab sample into ``runs/demo``), graphs, negatives (``mine``, fill values by ``fill_llm``,
    default ``llm``), verification (``verify``, teacher ``llm``, default the embedded model),
    exports (``export``); ``replay_policy``: the replay verifier's ``--replay-policy-*`` model.
    ``config``: a pipeline file (``pipeline_settings``) for what is not given.
    ``dask_address``: the graphs, the mining and the verification on that Dask scheduler."""
    if config:
        p = pipeline_settings(config)
        run, inputs, source = run or p.command.run, inputs or p.command.input, source or p.command.source
        mine, verify, llm, replay = mine or p.mine, verify or p.verify, llm or p.teacher_llm, replay or p.replay
        fill_llm, export = fill_llm or p.fill_llm, export or p.export
        replay_policy = replay_policy or p.replay_policy_llm
        dask_address = dask_address or p.dask.dask_address
    run = run or "runs/demo"
    unwrap(ingest_task(source or SynthesizeCommand.source, inputs or [BUNDLED], run, return_state=True))
    unwrap(on_dask(build_graphs_flow, dask_address)(run=run, return_state=True))
    unwrap(on_dask(propose_negatives_flow, dask_address)(run=run, config=mine, fill_llm=fill_llm or llm,
                                                         by_chunk=dask_address is not None, return_state=True))
    return unwrap(on_dask(verify_pairs_flow, dask_address)(run=run, config=verify, llm=llm, replay=replay,
                                                           replay_policy=replay_policy, export=export,
                                                           shards=verify_shards(dask_address), return_state=True))


def verify_shards(address: str | None) -> int:
    """Two shards per worker thread of the cluster at ``address`` (None: 0, one task)."""
    return 2 * dask_threads(address) if address else 0


def build_parser():
    """``SynthesizeCommand`` (with ``--config``, the pipeline file), then the stages' flags:
    ``MineConfig`` (its seed stays the miner's own: ``--seed`` is the teacher's) with the fill model
    under ``--fill-``, ``VerifyConfig`` (``--prompt-budget`` is an old name of ``--axtree-chars``
    here, ``--budget`` of ``--sample-size``), the shared model's ``LLMConfig``, and ``ExportOptions``
    (``--format``, ``--tokenizer``, ...; its seed, AXTree budget and prompt re-rendering are the
    pipeline file's ``export`` section only: the flags are the teacher's)."""
    ap = make_parser("python -m flows.synthesize", __doc__)
    SynthesizeCommand.add_args(ap)
    MineConfig.add_args(ap, skip=("seed",))
    LLMConfig.add_args(ap, prefix="fill-")                 # the model that completes fill values
    VerifyConfig.add_args(ap, skip=("budget",))            # --budget is the sample size here, as it always was
    LLMConfig.add_args(ap, skip=TEACHER_OWN)              # both models; those three come from VerifyConfig
    ReplayConfig.add_args(ap, prefix="replay-")           # --verifier replay, as teacher.verify
    LLMConfig.add_args(ap, prefix="replay-policy-")       # --replay-continuation policy's model
    ExportOptions.add_args(ap, skip=("seed", "axtree_chars", "prompt_budget", "prompt_template", "untrusted"))
    DaskConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        p = pipeline_settings(args.config, args)
    except (FileNotFoundError, ValueError) as e:
        return error_exit(e)
    if not p.command.run:
        ap.error("--run (or run: in the --config file) is required")
    with dask_scheduler(p.dask) as address:
        if p.command.verify_only:
            state = on_dask(verify_pairs_flow, address)(run=p.command.run, config=p.verify, llm=p.teacher_llm,
                                                        replay=p.replay, replay_policy=p.replay_policy_llm,
                                                        export=p.export,
                                                        shards=verify_shards(address), return_state=True)
        else:
            state = synthesize_flow(run=p.command.run, inputs=p.command.input, source=p.command.source, mine=p.mine,
                                    verify=p.verify, llm=p.teacher_llm, fill_llm=p.fill_llm, replay=p.replay,
                                    replay_policy=p.replay_policy_llm,
                                    export=p.export, dask_address=address, return_state=True)
    return exit_code(state)


if __name__ == "__main__":
    sys.exit(main())
