"""Verify the sampled candidate pairs with a teacher model and keep its judgments as gold.

    python -m teacher.verify --run RUN [--backend {openai,local} --model M --base-url URL --k 5]

For every ``sampled`` row of ``RUN/candidates.parquet``: a fair coin seeded by the pair puts
the demonstrated (positive) action at Response 1 or 2 (``label`` = its position); the teacher
sees the pair in the comparative-judgment format (``judgment.format``: WebPRMBench's structure,
Action-Only) at temperature 0.2 with seed ``seed + attempt``, up to K=5 sequential attempts,
stopping at the first that agrees with the label. An attempt is valid when it ends in exactly
one ``<Answer>Response N</Answer>``. Outcomes per attempt: ``agree``, ``disagree``, ``truncated``
(no valid answer and the generation hit ``--max-tokens``) and ``unparsed`` (no valid answer);
the last two use an attempt.

Gold judgment: the agreeing attempt's text, as written. The ``<think>``, ``<Criteria>`` and
``<Analysis>`` sections are requested, not required: how many kept judgments lack each is
counted (``sections_missing``). Discard reasons: ``all_attempts_disagree`` (every attempt
contradicted the label: the paper's rule) and ``no_agreement`` (no attempt agreed, some had no
valid answer).

**Verdict mode** (``VerifyConfig.verdict_mode``, recorded per attempt as ``verdicts[].mode``
and in ``stats.json``): ``generate`` as above; ``score`` (a local, in-process teacher only) takes
the likelier of the two answer tags after the prompt (``llm.scoring``: one forward pass, always a
verdict). Scoring is deterministic, so it is one attempt: the pair is kept when it agrees with the
label, else discarded (``all_attempts_disagree``). Its gold judgment is the bare answer tag
``<Answer>Response N</Answer>`` for the label: a label-only row, still a valid answer in the
benchmark's format (the three sections count as missing). ``score-both`` scores the prompt as
given and with the responses swapped and combines the margins (``llm.scoring.score``, mode ``score-both``):
a small model's pull toward one position cancels, so the kept pairs are not simply those whose
positive sits at the favoured position (measured: single scoring with Qwen2.5-Coder-0.5B picks
Response 1 every time and keeps exactly the label-1 pairs). The default ``auto`` is ``score-both``
with a local teacher (the embedded models rarely finish a parsable judgment) and ``generate`` with
an endpoint.

An infrastructure failure (no answer after the client's retries) is no attempt: the pair stays
pending, is written nowhere, and a rerun resumes it. Requests are a pure function of the pair
and the attempt number, so the LLM disk cache answers every attempt a killed or failed run
already got, and no request is sent twice; outputs are sorted and carry nothing volatile, so a
resumed run writes the same bytes as an uninterrupted one.

Writes ``RUN/preferences.parquet``, ``RUN/discarded.parquet`` (schemas in ``teacher.schema``),
the ``teacher.verify`` entry of ``stats.json`` (``in`` = pairs decided, ``out`` = kept,
``rejected`` by reason, plus ``sampled`` and ``pending``: ``sampled = in + pending``) and the
discards in ``rejects.jsonl``. Exit code 3 while pairs are pending.

**Verifier** (``VerifyConfig.verifier``): ``llm`` (the default) is the teacher above; ``replay``
needs no model: each pair is replayed in MiniWoB++ and the task's own validator decides
(``teacher.replay``: ground truth for runs of MiniWoB episodes). Its rows carry ``replay_outcome``
and ``replay_evidence`` and one verdict of mode ``replay``; ``equivalent`` (a false negative) and
``replay_mismatch`` pairs are discarded with that reason.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import pyarrow as pa

from cli.config import Configurable, check_ranges, make_parser
from cli.errors import error_exit
from cli.progress import done_line, progress
from data.loss import loss_line
from data.memory import arrow_allocator, held_heap
from data.rundir import Reject, RunDir, StageStats, atomic_write_parquet
from data.schema import RULES
from judgment.format import DEFAULT_BUDGET, UNTRUSTED_MODES, JudgmentFormat
from judgment.pairs import Pair, iter_pairs, load_pairs
from judgment.parse import answer_text, judgment_sections, parse_verdict
from teacher.schema import DISCARD_SCHEMA, PREFERENCE_SCHEMA

STAGE = "teacher.verify"
VERDICT_MODES = ("auto", "generate", "score", "score-both")
VERIFIERS = ("llm", "replay")
@dataclass
class VerifyConfig(Configurable):
    """How pairs are verified (the paper's settings by default); every field is a flag
    (``cli.config``). ``--seed``, ``--temperature`` and ``--max-tokens`` also set the teacher's
    ``LLMConfig``, whose other flags ``teacher.verify`` takes as well."""

    ARG_GROUP = "verification"

    k: int = field(default=5, metadata={"min": 1, "max": 1000, "help": "attempts per pair at most (paper: 5)"})
    # attempt i samples with seed + i: with k <= 1000 that stays a uint32 seed (llm.config.MAX_SEED)
    seed: int = field(default=0, metadata={"min": 0, "max": 2**31 - 1,
                                           "help": "seeds the order coin per pair; attempt i samples with seed + i"})
    temperature: float = field(default=0.2, metadata={"min": 0,
                                                      "help": "the teacher's sampling temperature (paper: 0.2)"})
    max_tokens: int = field(default=1024, metadata={"min": 1,
        "help": "completion tokens per attempt: room for a full judgment with its four sections (paper: ~472 out)"})
    axtree_chars: int = field(default=DEFAULT_BUDGET, metadata={"min": 1, "deprecated": ("budget", "prompt_budget"),
                                                                "help": "AXTree characters in the prompt"})
    untrusted: str = field(default="escape", metadata={
        "choices": UNTRUSTED_MODES, "help": "escape markers and tags in dataset text (the benchmark's format), "
                                            "or also fence every field"})
    prompt_template: str | None = field(default=None, metadata={
        "metavar": "FILE", "help": "YAML template (user, optional system) rendering a user's exact prompt text"})

    # -- verdict mode (issue 15; kept last; --verdict-mode) --
    # 'auto': 'score-both' for a local (in-process) teacher, 'generate' for an endpoint; 'generate':
    # the teacher writes a judgment; 'score': a local teacher's verdict by the answer tags'
    # likelihoods (llm.scoring), one deterministic attempt, gold judgment = the bare answer tag;
    # 'score-both': the same with both orders' margins combined (no position bias).
    verdict_mode: str = field(default="auto", metadata={
        "choices": VERDICT_MODES, "help": "generate: the teacher writes a judgment; score: a local teacher's verdict "
                                          "by the answer tags' likelihoods (score-both: both orders "
                                          "combined); auto: score-both locally, generate at an endpoint"})
    verifier: str = field(default="llm", metadata={
        "choices": VERIFIERS, "help": "llm: a teacher model judges each pair; replay: each pair is replayed in "
                                      "MiniWoB++ and the task's validator decides (teacher.replay; the "
                                      "--replay-* flags)"})

    @property
    def format(self) -> JudgmentFormat:
        return JudgmentFormat.from_options(self.prompt_template, self.untrusted, self.axtree_chars)

    def mode_for(self, is_local: bool) -> str:
        """The verdict mode used with a local (True) or endpoint (False) teacher."""
        if self.verdict_mode not in VERDICT_MODES:
            raise ValueError(f"verdict_mode must be one of {VERDICT_MODES}, not {self.verdict_mode!r}")
        if self.verdict_mode.startswith("score") and not is_local:
            raise ValueError("verdict_mode 'score' needs a local teacher (an endpoint only generates)")
        if self.verdict_mode == "auto":
            return "score-both" if is_local else "generate"
        return self.verdict_mode


@dataclass(slots=True)
class Attempt:
    attempt: int
    seed: int
    verdict: int | None
    outcome: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    mode: str = "generate"          # what produced the verdict: 'generate', 'score', 'score-both' or 'replay'


@dataclass(slots=True)
class Decision:
    """A pair's fate: 'kept' (with its judgment), 'discarded' (with a reason) or 'pending'."""

    pair: Pair
    status: str
    attempts: list[Attempt] = field(default_factory=list)
    judgment: str | None = None
    reason: str | None = None
    infra_error: str | None = None
    replay: object | None = None    # teacher.replay.Replay under --verifier replay


async def score_pair(client, pair: Pair, config: VerifyConfig) -> Decision:
    """A local teacher's verdict by scoring the two answer tags (``llm.scoring``): one attempt
    (scoring is deterministic; another would repeat it), kept when it agrees with the label, the
    gold judgment then the bare answer tag (a label-only row in the benchmark's format). The
    scores are cached like generated answers (``llm.scoring.cached_score``) and counted in the
    client's usage, so a rerun runs no forward pass and ``stats.json`` shows what the cache served."""
    from llm.cache import ResponseCache
    from llm.client import ChatResult
    from llm.scoring import cached_score

    mode = config.mode_for(True)
    cache = None if client.config.no_cache else ResponseCache(client.config.cache_dir)
    try:
        s, cached = await asyncio.to_thread(cached_score, client.config.local_model_dir(), pair.messages, mode, cache)
    except (OSError, RuntimeError) as e:          # a model that cannot load or run is no attempt
        return Decision(pair, "pending", [], infra_error=f"local_error: {type(e).__name__}: {e}")
    client.usage[STAGE].add(ChatResult(texts=[s.text], prompt_tokens=s.prompt_tokens, model=client.config.model_id,
                                       cached=cached, attempts=0 if cached else 1))
    outcome = "agree" if s.verdict == pair.label else "disagree"
    attempt = Attempt(1, config.seed, s.verdict, outcome, s.text, s.prompt_tokens, 0, 0.0, mode=mode)
    if outcome == "agree":
        return Decision(pair, "kept", [attempt], judgment=answer_text(pair.label))
    return Decision(pair, "discarded", [attempt], reason="all_attempts_disagree")


async def verify_pair(client, pair: Pair, config: VerifyConfig) -> Decision:
    """Up to K sequential attempts on one pair (see the module doc for the rules); a local
    teacher in 'score' mode decides by ``score_pair``."""
    if config.mode_for(client.config.is_local).startswith("score"):
        return await score_pair(client, pair, config)
    attempts: list[Attempt] = []
    for i in range(config.k):
        seed = config.seed + i
        result = await client.achat(pair.messages, stage=STAGE, temperature=config.temperature, seed=seed,
                                    max_tokens=config.max_tokens, n=1)
        if not result.ok:           # an outage is no attempt: resume the pair on the next run
            return Decision(pair, "pending", attempts, infra_error=result.infra_error)
        verdict = parse_verdict(result.text)
        if verdict is None:
            truncated = (result.finish_reasons or [""])[0] == "length"
            outcome = "truncated" if truncated else "unparsed"
        else:
            outcome = "agree" if verdict == pair.label else "disagree"
        attempts.append(Attempt(i + 1, seed, verdict, outcome, result.text, result.prompt_tokens,
                                result.completion_tokens, result.cost_usd))
        if outcome == "agree":
            return Decision(pair, "kept", attempts, judgment=result.text)
    outcomes = {a.outcome for a in attempts}
    reason = "all_attempts_disagree" if outcomes == {"disagree"} else "no_agreement"
    return Decision(pair, "discarded", attempts, reason=reason)


class Progress:
    """A tqdm bar of the decided pairs on stderr (``cli.progress``: count, rate, ETA), its postfix
    the kept, discarded and pending counts so far."""

    def __init__(self, total: int):
        self.done = Counter()
        self.bar = progress(total, STAGE, unit="pair")

    def update(self, status: str) -> None:
        self.done[status] += 1
        self.bar.set_postfix(kept=self.done["kept"], discarded=self.done["discarded"],
                             pending=self.done["pending"], refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


async def verify_all(client, pairs: Iterable[Pair], config: VerifyConfig, progress: Progress | None = None
                     ) -> list[Decision]:
    """Every pair (a list, or ``judgment.pairs.iter_pairs``' iterator, which renders a pair's prompt
    when the pair is taken), twice the client's ``concurrency`` pairs at a time: a pair is taken when
    one is decided, so the prompts are rendered while the requests are in flight, not all before the
    first is sent (the client bounds the requests in flight); attempts of one pair stay sequential.
    Decisions come back in the order of ``pairs``."""
    decisions: dict[int, Decision] = {}
    todo = enumerate(pairs)

    async def worker():
        for i, pair in todo:
            decisions[i] = decision = await verify_pair(client, pair, config)
            if progress is not None:
                progress.update(decision.status)
    try:
        await asyncio.gather(*(worker() for _ in range(max(1, 2 * client.config.concurrency))))
        return [decisions[i] for i in range(len(decisions))]
    finally:
        if progress is not None:
            progress.close()
        await client.aclose()


def _row(d: Decision, teacher_model: str) -> dict:
    p = d.pair
    return {**p.row, "label": p.label, "response_1": p.response_1, "response_2": p.response_2,
            "attempts": len(d.attempts),
            "verdicts": [{"attempt": a.attempt, "seed": a.seed, "verdict": a.verdict, "outcome": a.outcome,
                          "mode": a.mode} for a in d.attempts],
            "teacher_model": teacher_model, "intent": p.state.intent, "url": p.state.url,
            "replay_outcome": d.replay.outcome if d.replay else None,
            "replay_evidence": json.dumps(d.replay.evidence, sort_keys=True) if d.replay else None,
            "axtree_chars": p.cut["chars_total"], "axtree_chars_cut": p.cut["chars_cut"],
            "prompt_tokens": sum(a.prompt_tokens for a in d.attempts),
            "completion_tokens": sum(a.completion_tokens for a in d.attempts),
            # rounded so that float summation order can never show in the bytes
            "cost_usd": round(sum(a.cost_usd for a in d.attempts), 9)}


def effective_k(config: VerifyConfig, mode: str) -> dict:
    """``effective_k`` and its one-line note for stats.json: a score mode's verdict is
    deterministic, so a pair gets one attempt whatever ``--k`` says (nothing is refused)."""
    if mode.startswith("score"):
        return {"effective_k": 1, "effective_k_note": f"{mode} verdicts are deterministic: one attempt per pair, "
                                                      f"--k {config.k} repeats nothing"}
    return {"effective_k": config.k, "effective_k_note": "generate: up to k sampled attempts per pair"}


# Decisions whose rows are converted to Arrow at once: converting 10,000 rows (127 MB of prompts)
# in one call took twice as long as in batches of 1,024 (0.53 against 0.25 s, jemalloc).
ROW_BATCH = 1024


def write_outputs(run: RunDir, decisions: list[Decision], teacher_model: str) -> tuple[int, int]:
    """``preferences.parquet`` and ``discarded.parquet`` sorted by pair id (pending pairs in
    neither). Returns (kept, discarded)."""
    rows: dict[str, list[dict]] = {"kept": [], "discarded": []}
    tables: dict[str, list[pa.Table]] = {"kept": [], "discarded": []}
    schemas = {"kept": PREFERENCE_SCHEMA, "discarded": DISCARD_SCHEMA}
    for d in sorted(decisions, key=lambda d: d.pair.row["pair_id"]):
        if d.status == "kept":
            row = {**_row(d, teacher_model), "judgment": d.judgment,
                   "messages": d.pair.messages + [{"role": "assistant", "content": d.judgment}]}
        elif d.status == "discarded":
            row = {**_row(d, teacher_model), "reason": d.reason, "texts": [a.text for a in d.attempts]}
        else:
            continue
        rows[d.status].append(row)
        if len(rows[d.status]) == ROW_BATCH:
            tables[d.status].append(pa.Table.from_pylist(rows[d.status], schema=schemas[d.status]))
            rows[d.status] = []
    for status, name in (("kept", "preferences.parquet"), ("discarded", "discarded.parquet")):
        tables[status].append(pa.Table.from_pylist(rows[status], schema=schemas[status]))
        atomic_write_parquet(run.root / name, pa.concat_tables(tables[status]).combine_chunks())
    return sum(map(len, tables["kept"])), sum(map(len, tables["discarded"]))


def summarize_decisions(decisions: list[Decision]) -> dict:
    """Per-rule outcomes, attempts histogram and verdict outcomes (for stats.json and the report)."""
    by_rule = {r: Counter() for r in RULES}
    attempts_kept, outcomes, missing, modes = Counter(), Counter(), Counter(), Counter()
    for d in decisions:
        by_rule[d.pair.row["rule"]][d.status] += 1
        if d.status == "kept":
            attempts_kept[len(d.attempts)] += 1
            missing.update(s for s, present in judgment_sections(d.judgment).items() if not present)
        for a in d.attempts:
            outcomes[a.outcome] += 1
            modes[a.mode] += 1
    return {"by_rule": {r: dict(sorted(c.items())) for r, c in by_rule.items() if c},
            "kept_at_attempt": {str(k): v for k, v in sorted(attempts_kept.items())},
            "verdict_outcomes": dict(sorted(outcomes.items())),
            "sections_missing": dict(sorted(missing.items())),
            "verdict_modes": dict(sorted(modes.items())),
            "calls_decided": sum(len(d.attempts) for d in decisions if d.status != "pending")}


def replay_all(run: RunDir, pairs: list[Pair], config: VerifyConfig, replay_config, backend=None,
               progress: Progress | None = None) -> tuple[list[Decision], dict]:
    """``--verifier replay``: every pair replayed in MiniWoB++ (``teacher.replay.replay_all``: by
    episode, in ``replay_config.workers`` processes), finished pairs served by the replay cache.
    Returns the decisions in the order of ``pairs`` and the replay's figures for stats.json."""
    from llm import LLMConfig
    from teacher import replay as rp

    backend = backend or rp.MiniWoBBackend(LLMConfig() if replay_config.continuation == "policy" else None)
    on_done = (lambda r: progress.update("kept" if r.kept else "discarded")) if progress is not None else None
    try:
        results, counts = rp.replay_all(rp.load_targets(run, pairs), replay_config, backend, on_done)
    finally:
        if progress is not None:
            progress.close()
    decisions = []
    for pair, result in zip(pairs, results):
        f = rp.verdict_fields(pair, result, config.seed)
        attempt = Attempt(1, f["seed"], f["verdict"], f["outcome"], f["text"], 0, 0, 0.0, mode="replay")
        decisions.append(Decision(pair, f["status"], [attempt], judgment=f["judgment"], reason=f["reason"],
                                  replay=result))
    return decisions, {"replay": {**rp.summarize(list(zip(pairs, results))), "backend": backend.name,
                                  "solver_steps": replay_config.solver_steps,
                                  "workers": rp.worker_count(replay_config),
                                  "continuation": replay_config.continuation, "rollouts": replay_config.rollouts,
                                  **dict(counts)}}


def verify(run_dir: str | Path, config: VerifyConfig | None = None, llm_config=None,
           progress: bool = True, replay_config=None, replay_backend=None) -> StageStats:
    """Verify every sampled pair of a run; write the outputs and the stage's stats. Under
    ``--verifier replay`` no model is loaded: ``replay_config`` (``teacher.replay.ReplayConfig``)
    and ``replay_backend`` (default: the MiniWoB harness and solvers) replay the pairs."""
    from llm import LLMClient, LLMConfig

    config = config or VerifyConfig()
    if config.verifier == "replay":
        run, pairs, t0 = open_pairs(run_dir, config)
        return _verify_by_replay(run, pairs, config, replay_config, replay_backend, progress, t0)
    run, (n, pairs), t0 = open_pairs(run_dir, config, lazy=True)
    client = LLMClient(llm_config or LLMConfig())
    with held_heap():      # the states and prompts stay; each request's objects come and go
        decisions = asyncio.run(verify_all(client, pairs, config, Progress(n) if progress else None)) if n else []
        return write_verification(run, [d.pair for d in decisions], decisions, config, client.config,
                                  client.usage.get(STAGE), t0)


def open_pairs(run_dir: str | Path, config: VerifyConfig, lazy: bool = False) -> tuple[RunDir, list[Pair], float]:
    """The run (inputs checked, locked for this stage), its sampled pairs and the stage's start time;
    ``lazy``: the pairs as ``judgment.pairs.iter_pairs`` gives them, (how many, an iterator that
    renders each prompt when it is reached)."""
    check_ranges(config, "verify config")    # settings built in Python: the flags are checked when parsed
    # jemalloc: under mimalloc (pyarrow's default), gathering the output rows' Arrow batches into one
    # table (combine_chunks, 127 MB of prompts at the paper's scale) took 1 s, under jemalloc 0.08 s.
    arrow_allocator()
    run = RunDir(run_dir)
    t0 = time.perf_counter()
    run.check_inputs(STAGE, run.root / "candidates.parquet", run.trajectories)   # same upstream run
    if lazy:
        return run, iter_pairs(run, config.seed, config.format), t0
    return run, load_pairs(run, config.seed, config.format), t0



def verify_shard(run_dir: str | Path, config: VerifyConfig, llm_config, pair_ids: list[str]
                 ) -> tuple[list[Decision], object]:
    """The decisions of the sampled pairs ``pair_ids`` (a shard: the verify-pairs flow's task on a
    Dask worker), each carrying its pair id in place of its pair (the prompts stay here), and the
    teacher's usage (``llm.cost.UsageTotals``, None without calls). A pair's order coin and
    requests come from the pair alone, so it gets the same verdict in any shard, and a retried
    shard is answered by the LLM cache for every call an earlier try got."""
    from llm import LLMClient

    pairs = load_pairs(RunDir(run_dir), config.seed, config.format, pair_ids=set(pair_ids))
    client = LLMClient(llm_config)
    decisions = asyncio.run(verify_all(client, pairs, config)) if pairs else []
    return [replace(d, pair=d.pair.row["pair_id"]) for d in decisions], client.usage.get(STAGE)


def merge_shards(pairs: list[Pair], shards: list[tuple[list[Decision], object]]) -> tuple[list[Decision], object]:
    """The shards' decisions in the order of ``pairs`` (each given its pair back) and their usage summed."""
    from llm.cost import UsageTotals

    by_id, usage = {}, None
    for decisions, part in shards:
        by_id.update((d.pair, d) for d in decisions)
        if part is not None:
            usage = usage or UsageTotals()
            for f in fields(UsageTotals):
                setattr(usage, f.name, getattr(usage, f.name) + getattr(part, f.name))
    return [replace(by_id[p.row["pair_id"]], pair=p) for p in pairs], usage


def write_verification(run: RunDir, pairs: list[Pair], decisions: list[Decision], config: VerifyConfig,
                       llm_config, usage, t0: float) -> StageStats:
    """The outputs, stats and rejects of the decided ``pairs`` (``llm_config``: the teacher's,
    validated; ``usage``: its ``UsageTotals`` for this stage, None without calls)."""
    teacher_model = llm_config.model_id
    n_kept, n_disc = write_outputs(run, decisions, teacher_model)

    pending = [d for d in decisions if d.status == "pending"]
    rejected = Counter(d.reason for d in decisions if d.status == "discarded")
    stats = StageStats(STAGE, n_in=n_kept + n_disc, n_out=n_kept, rejected=rejected)
    cut = [p.cut for p in pairs]
    stats.extra = {
        "sampled": len(pairs), "pending": len(pending),
        "pending_errors": dict(Counter((d.infra_error or "").split(":")[0] for d in pending)),
        "pending_pair_ids": sorted(d.pair.row["pair_id"] for d in pending)[:50],
        "teacher_model": teacher_model, "endpoint": llm_config.endpoint,
        "config": {"k": config.k, "seed": config.seed, "temperature": config.temperature,
                   "max_tokens": config.max_tokens, **config.format.describe(),
                   "verdict_mode": config.mode_for(llm_config.is_local),
                   **effective_k(config, config.mode_for(llm_config.is_local)),
                   **({"prompt_template": str(config.prompt_template)} if config.prompt_template else {})},
        **summarize_decisions(decisions),
        "prompt": {"axtrees_cut": sum(c["truncated"] for c in cut),
                   "axtree_chars": sum(c["chars_total"] for c in cut),
                   "axtree_chars_cut": sum(c["chars_cut"] for c in cut),
                   "targets_missing": sum(len(c["targets"]) - len(c["targets_found"]) for c in cut),
                   "neutralized_tokens": sum(c["neutralized"] for c in cut)},
        "llm": usage.as_dict() if usage is not None else {},
        "seconds": round(time.perf_counter() - t0, 2),
    }
    rejects = [Reject(STAGE, d.reason, "candidates.parquet",
                      " ".join(f"{a.attempt}:{a.outcome}" for a in d.attempts),
                      {"pair_id": d.pair.row["pair_id"], "traj_id": d.pair.row["traj_id"],
                       "step_idx": d.pair.row["step_idx"], "rule": d.pair.row["rule"]})
               for d in sorted(decisions, key=lambda d: d.pair.row["pair_id"]) if d.status == "discarded"]
    run.write_stage(stats, rejects)
    return stats


def _verify_by_replay(run: RunDir, pairs: list[Pair], config: VerifyConfig, replay_config, backend,
                      progress: bool, t0: float) -> StageStats:
    from teacher.replay import ReplayConfig

    replay_config = replay_config or ReplayConfig()
    check_ranges(replay_config, "replay config")
    decisions, extra = replay_all(run, pairs, config, replay_config, backend,
                                  Progress(len(pairs)) if progress and pairs else None)
    teacher_model = f"replay:{extra['replay']['backend']}"
    n_kept, n_disc = write_outputs(run, decisions, teacher_model)
    stats = StageStats(STAGE, n_in=n_kept + n_disc, n_out=n_kept,
                       rejected=Counter(d.reason for d in decisions if d.status == "discarded"))
    stats.extra = {"sampled": len(pairs), "pending": 0, "pending_errors": {}, "pending_pair_ids": [],
                   "teacher_model": teacher_model, "endpoint": "replay",
                   "config": {"verifier": "replay", "seed": config.seed, "verdict_mode": "replay",
                              "k": 1, "effective_k": 1,
                              "effective_k_note": "replay: one deterministic replay per pair"},
                   **summarize_decisions(decisions), **extra, "llm": {},
                   "seconds": round(time.perf_counter() - t0, 2)}
    rejects = [Reject(STAGE, d.reason, "candidates.parquet", d.attempts[0].text,
                      {"pair_id": d.pair.row["pair_id"], "traj_id": d.pair.row["traj_id"],
                       "step_idx": d.pair.row["step_idx"], "rule": d.pair.row["rule"]})
               for d in sorted(decisions, key=lambda d: d.pair.row["pair_id"]) if d.status == "discarded"]
    run.write_stage(stats, rejects)
    return stats


# A few words after a loss reason (data.loss).
LOSS_WHY = {"all_attempts_disagree": "every attempt preferred the negative",
            "no_agreement": "no attempt agreed; some gave no answer tag or were cut off",
            "pending": "infrastructure failures: rerun to resume"}


def format_summary(stats: StageStats) -> str:
    e = stats.extra
    lines = [stats.summary() + f"; sampled={e['sampled']} pending={e['pending']}"]
    lost = {**stats.rejected, **({"pending": e["pending"]} if e["pending"] else {})}
    if (line := loss_line(STAGE, e["sampled"], stats.n_out, lost, "sampled pairs", why=LOSS_WHY)):
        lines.append(line)
    if e["pending"]:
        lines.append(f"{e['pending']} pairs pending after infrastructure failures {e['pending_errors']}: "
                     f"rerun the same command to resume them")
    llm = e["llm"]
    if llm:
        decided = stats.n_in or 1
        lines.append(f"teacher {e['teacher_model']}: {e['calls_decided']} calls ({e['calls_decided'] / decided:.2f} "
                     f"per pair), {llm['cached']} from cache, kept at attempt {e['kept_at_attempt']}, "
                     f"verdicts {e['verdict_outcomes']}, ${llm['cost_usd']:.4f}")
    elif e.get("replay"):
        r = e["replay"]
        lines.append(f"replay ({r['backend']}, {r.get('continuation', 'solver')} x{r.get('rollouts', 1)}, "
                     f"continuation steps <= {r['solver_steps']}, {r['workers']} worker(s)): outcomes {r['outcomes']}; "
                     f"{r.get('replayed', 0)} replayed, {r.get('cached', 0)} from the replay cache")
    elif e.get("verdict_modes"):      # scoring only: no chat completions were requested
        lines.append(f"teacher {e['teacher_model']}: verdicts by {e['config']['verdict_mode']} "
                     f"{e['verdict_modes']}, outcomes {e['verdict_outcomes']}")
    return "\n".join(lines)


def done_summary(stats: StageStats, run_dir: str | Path) -> str:
    """The command's last line: what was decided, how long it took, what was written."""
    e = stats.extra
    root = Path(run_dir)
    return done_line(STAGE, f"kept {stats.n_out} of {e['sampled']} pairs ({stats.n_in - stats.n_out} discarded, "
                            f"{e['pending']} pending)", e["seconds"],
                     f"wrote {root / 'preferences.parquet'} and {root / 'discarded.parquet'}")


@dataclass
class VerifyCommand(Configurable):
    """What ``python -m teacher.verify`` runs on and how it shows progress."""

    ARG_GROUP = "command"

    run: str = field(metadata={"help": "run directory holding candidates.parquet"})
    quiet: bool = field(default=False, metadata={"help": "no progress lines"})


def build_parser(prog: str = "python -m teacher.verify", doc: str = __doc__):
    """The command's flags (``cli.config``): ``VerifyCommand``, ``VerifyConfig`` and the
    teacher's ``LLMConfig`` (whose seed, temperature and max_tokens come from ``VerifyConfig``)."""
    from llm import LLMConfig
    from teacher.replay import ReplayConfig

    ap = make_parser(prog, doc)
    VerifyCommand.add_args(ap)
    VerifyConfig.add_args(ap)     # --k, --seed, --temperature, --max-tokens, --axtree-chars, --untrusted, ...
    LLMConfig.add_args(ap, skip=("seed", "temperature", "max_tokens"))   # the teacher; those three come from above
    ReplayConfig.add_args(ap, prefix="replay-")     # --verifier replay: --replay-solver-steps, ...
    # --replay-continuation policy: the policy's model, as the search CLIs' --policy-* flags
    LLMConfig.add_args(ap, prefix="replay-policy-")
    return ap


def main(argv: list[str] | None = None) -> int:
    from harness.policy import PolicyError
    from llm import LLMConfig
    from teacher.replay import NotReplayable, ReplayConfig

    ap = build_parser()
    args = ap.parse_args(argv)
    cmd = VerifyCommand.from_args(args)
    config = VerifyConfig.from_args(args)
    if config.k < 1:
        ap.error("--k must be >= 1")
    try:
        _ = config.format                      # a format the config cannot render: one line, before any call
    except ValueError as e:
        ap.error(str(e))
    replay = ReplayConfig.from_args(args, prefix="replay-")
    try:
        backend = None
        if config.verifier == "replay":
            from teacher.replay import MiniWoBBackend

            policy = LLMConfig.from_args(args, prefix="replay-policy-") if replay.continuation == "policy" else None
            backend = MiniWoBBackend(policy.validate() if policy is not None else None)
        stats = verify(cmd.run, config, LLMConfig.from_args(args), progress=not cmd.quiet,
                       replay_config=replay, replay_backend=backend)
    except (FileNotFoundError, NotReplayable, PolicyError) as e:
        return error_exit(e)
    print(format_summary(stats))
    print(done_summary(stats, cmd.run))
    return 3 if stats.extra["pending"] else 0


if __name__ == "__main__":
    sys.exit(main())
