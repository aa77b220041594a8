"""Export the verified preferences for training (TRL) and evaluation (WebPRMBench format).

    python -m dataset.export --run RUN --format {trl,webprmbench,trl-preference,trl-labels} [--seed 42 --no-card]
    python -m dataset.export --run RUN --format trl --preset paper          # every verified pair in train
    python -m dataset.export --run RUN --format trl --gmcp-ratio 0.5        # a controlled-GMCP dataset

Every prompt is in the comparative-judgment format (``judgment.format``: WebPRMBench's structure,
Action-Only), the one the teacher saw; ``--prompt-template FILE`` (or ``--untrusted fence``)
re-renders the prompts from the run's states in a user's exact text instead.

``trl``: conversational prompt/completion files ``RUN/export/trl/{train,test}.parquet``
(``prompt`` = [system, user], ``completion`` = [assistant: the gold judgment]) for TRL's
``SFTTrainer``, split by task: every pair of a ``task_id`` lands on the same side, so no task is
in both train and test. The split is a seeded shuffle of the sorted task ids.

``trl-preference``: conversational ``prompt`` / ``chosen`` / ``rejected`` files
``RUN/export/trl-preference/{train,test}.parquet`` for TRL's ``RewardTrainer`` and ``DPOTrainer``
(the state; a+; a-: ``dataset.preference``), the same task split.

``webprmbench``: ``RUN/export/webprmbench.parquet``, one row per pair of the held-out tasks
(the same split; ``--split all`` for every pair): ``state_idx`` (the state ``(traj_id,
step_idx)``), ``pair_idx`` (the pair within its state), ``expected`` (1 or 2: the position of the
better response in ``prompt``, as ``judgment.parse.parse_verdict`` returns it), ``prompt``
([system, user] messages) and ``source_name`` (``surfprm/<site>``), plus the pair's id, rule,
axis and task for analysis. On a replay-verified run (``teacher.verify --verifier replay``) it is
the offline PRM benchmark instead (``dataset.prmbench``): 4 replay-proven negatives (``harmful`` or
``detour``) per state, ``source_name`` ``miniwob/<task>``, each row with its ``replay_outcome`` and
``replay_evidence``; states with fewer are left out and counted.

``trl-labels`` (an ablation WITHOUT teacher rationales): ``RUN/export/trl-labels/{train,test}.parquet``
built from the sampled candidates, not from the teacher's kept pairs. The prompt is the same
Action-Only prompt (``judgment.pairs.load_pairs``: same seeded order coin, same AXTree budget
``--axtree-chars``); the completion is only the answer tag (``<Answer>Response 2</Answer>``),
the position of the demonstrated action. It needs no teacher, so it gives training data when the
teacher kept nothing (the embedded 135M teacher keeps 0 pairs); a PRM trained on it learns to
name a winner, not to argue for it. Same task split; rows also carry ``traj_id, step_idx, site,
gmcp`` so that ``prm.evaluate`` can group pairs by state.

Presets: ``heldout`` (default) holds out ``--test-fraction`` of the tasks as above, so that a PRM
can be checked on tasks it never saw when no benchmark is at hand; ``paper`` trains as the paper
does, on every verified pair with no task held out (``test.parquet`` is empty; ``webprmbench``
then exports every pair).

**Token lengths** (``trl``, ``trl-labels``): every row is counted as TRL's ``SFTTrainer`` tokenizes
it (the chat template over the prompt, then over prompt + completion) with ``--tokenizer NAME`` (a
folder or a model name in the local Hugging Face cache), by default the run's local teacher's (the
embedded model's, after ``make run``). ``stats.json`` and the card record min, median, p95 and max
of prompt, completion and total tokens, and ``max_length``: the longest row rounded up to a multiple
of 64, which the card's snippet passes to ``SFTConfig`` so that TRL truncates nothing (its default
1024 cuts the end of a longer row, the completion first, and drops the rows left without one).
``--max-length N`` warns about every row longer than N.

**Controlled-GMCP datasets** (surfPRM Table 6): ``--gmcp-ratio R`` keeps the largest subset of
the exported rows (both splits together) whose GMCP share is R +- 0.02, by dropping rows, never
by duplicating; the task split is drawn before, on every row. The dropped rows go to
``rejects.jsonl`` with the reason ``gmcp_ratio`` and are counted in ``stats.json`` (with the
share before and after, ``gmcp_ratio``); see ``dataset.gmcp_ratio``.

Both load offline with ``datasets.load_dataset("parquet", data_files=...)``. Unless
``--no-card``, the dataset card (``RUN/README.md``, ``dataset.card``) and the report
(``RUN/report/``, ``dataset.report``) are written afterwards.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from cli.config import CLIParser, Configurable, make_parser
from cli.errors import error_exit
from data.loss import loss_line
from data.rundir import RunDir, StageStats, atomic_write_parquet
from dataset import preference, prmbench
from dataset.gmcp_ratio import drop_to_ratio
from dataset.tables import read_pinned, require_run_dir
from judgment.format import UNTRUSTED_MODES, JudgmentFormat, render_pair
from judgment.pairs import load_pairs
from judgment.parse import answer_text

MESSAGE = pa.struct([pa.field("role", pa.string(), nullable=False),
                     pa.field("content", pa.string(), nullable=False)])
_PAIR_KEYS = [pa.field("pair_id", pa.string(), nullable=False), pa.field("task_id", pa.string(), nullable=False),
              pa.field("rule", pa.string(), nullable=False), pa.field("axis", pa.string(), nullable=False)]
TRL_SCHEMA = pa.schema([
    pa.field("prompt", pa.list_(MESSAGE), nullable=False),
    pa.field("completion", pa.list_(MESSAGE), nullable=False),
    *_PAIR_KEYS,
    pa.field("label", pa.int8(), nullable=False),
])
WEBPRMBENCH_SCHEMA = pa.schema([
    pa.field("state_idx", pa.int32(), nullable=False),
    pa.field("pair_idx", pa.int32(), nullable=False),
    pa.field("expected", pa.int8(), nullable=False),
    pa.field("prompt", pa.list_(MESSAGE), nullable=False),
    pa.field("source_name", pa.string(), nullable=False),
    *_PAIR_KEYS,
    pa.field("traj_id", pa.string(), nullable=False),
    pa.field("step_idx", pa.int32(), nullable=False),
])
TRL_LABELS_SCHEMA = pa.schema([
    *TRL_SCHEMA,
    pa.field("traj_id", pa.string(), nullable=False),
    pa.field("step_idx", pa.int32(), nullable=False),
    pa.field("site", pa.string(), nullable=False),
    pa.field("gmcp", pa.bool_(), nullable=False),
])
TRL_PREFERENCE_SCHEMA = preference.preference_schema(MESSAGE, _PAIR_KEYS)
TRL_DIR = Path("export") / "trl"
TRL_LABELS_DIR = Path("export") / "trl-labels"
WEBPRMBENCH_FILE = Path("export") / "webprmbench.parquet"
FORMATS = ("trl", "webprmbench")              # the dataset's exports (what the flows write)
PREFERENCE_FORMATS = ("trl-preference",)       # RewardTrainer / DPOTrainer rows (dataset.preference)
ABLATION_FORMATS = ("trl-labels",)             # on request only
_COLUMNS = ["pair_id", "site", "traj_id", "task_id", "step_idx", "rule", "axis", "gmcp", "label", "messages",
            "response_1", "response_2"]
PRESETS = ("heldout", "paper")


def split_tasks(task_ids, seed: int = 42, test_fraction: float = 0.2) -> set[str]:
    """The held-out tasks: a seeded shuffle of the sorted distinct ids, the first
    ``round(n * test_fraction)`` of them (at least one and never all, when there are two or more)."""
    tasks = sorted(set(task_ids))
    if len(tasks) < 2 or test_fraction <= 0:
        return set()
    random.Random(seed).shuffle(tasks)
    n_test = min(max(round(len(tasks) * test_fraction), 1), len(tasks) - 1)
    return set(tasks[:n_test])


def load_preferences(run: RunDir, extra: tuple[str, ...] = ()) -> list[dict]:
    path = run.root / "preferences.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run `python -m teacher.verify` first")
    rows = read_pinned(path, _COLUMNS + list(extra))
    return sorted(rows, key=lambda r: r["pair_id"])


MAX_LENGTH_MULTIPLE = 64


def tokenizer_source(run: RunDir, name: str | None) -> str | None:
    """What to count tokens with: ``name``, else the run's local teacher's folder (``teacher.verify``'s
    endpoint ``local:<folder>``), else the embedded model's (an endpoint teacher's tokenizer is not at
    hand: a count with another tokenizer beats none, and the card says which), else None."""
    from llm.embedded import default_model_dir

    if name:
        return name
    endpoint = run.read_stats().get("teacher.verify", {}).get("endpoint") or ""
    folders = [Path(endpoint.removeprefix("local:"))] if endpoint.startswith("local:") else []
    return next((str(f) for f in [*folders, default_model_dir()] if (f / "tokenizer_config.json").exists()), None)


def load_tokenizer(source: str):
    """``AutoTokenizer`` of a folder or a cached model name; ``ValueError`` (one line) when it cannot load."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot load tokenizer {source!r}: {str(e).strip().splitlines()[0]}") from None


def token_lengths(tokenizer, prompt: list[dict], completion: list[dict]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of one row as TRL's ``SFTTrainer`` tokenizes a
    conversational prompt/completion row: the chat template over the prompt with the generation
    prompt, then over prompt + completion; the completion starts where the two part."""
    return token_lengths_many(tokenizer, [(prompt, completion)])[0]


TOKENIZE_BATCH = 256


def token_lengths_many(tokenizer, rows: list[tuple[list[dict], list[dict]]]) -> list[tuple[int, int]]:
    """:func:`token_lengths` of many (prompt, completion) rows: the chat template applied to
    ``TOKENIZE_BATCH`` conversations per call, as ``apply_chat_template`` takes a batch (one
    template pass and one batched call of the fast tokenizer instead of one each per row; the
    same ids)."""
    out = []
    for start in range(0, len(rows), TOKENIZE_BATCH):
        chunk = rows[start:start + TOKENIZE_BATCH]
        prompts = tokenizer.apply_chat_template([p for p, _ in chunk], tokenize=True, return_dict=True,
                                                add_generation_prompt=True)["input_ids"]
        fulls = tokenizer.apply_chat_template([p + c for p, c in chunk], tokenize=True, return_dict=True)["input_ids"]
        for p, full in zip(prompts, fulls, strict=True):
            shared = next((i for i, (a, b) in enumerate(zip(p, full)) if a != b), min(len(p), len(full)))
            out.append((shared, len(full) - shared))
    return out


def _summary(values: list[int]) -> dict:
    """min, median, p95 (nearest rank) and max."""
    v = sorted(values)
    median = statistics.median(v)
    return {"min": v[0], "median": int(median) if median == int(median) else median,
            "p95": v[math.ceil(0.95 * len(v)) - 1], "max": v[-1]}


def token_stats(rows: list[dict], tokenizer, name: str, max_length: int | None = None) -> dict:
    """Token lengths of export rows (``prompt``/``completion`` messages) for ``stats.json`` and the
    card: their summaries, the ``max_length`` that truncates no row, and the rows longer than a
    given ``max_length``."""
    lengths = token_lengths_many(tokenizer, [(r["prompt"], r["completion"]) for r in rows])
    out = {"tokenizer": name, "rows": len(rows)}
    if not rows:
        return out
    totals = [p + c for p, c in lengths]
    out.update(prompt=_summary([p for p, _ in lengths]), completion=_summary([c for _, c in lengths]),
               total=_summary(totals),
               max_length=MAX_LENGTH_MULTIPLE * math.ceil(max(totals) / MAX_LENGTH_MULTIPLE))
    if max_length is not None:
        longer = sorted(r["pair_id"] for r, t in zip(rows, totals) if t > max_length)
        out["over_max_length"] = {"max_length": max_length, "rows": len(longer), "pair_ids": longer[:20]}
    return out


def measure_tokens(run: RunDir, rows: list[dict], tokenizer: str | None, max_length: int | None) -> dict | None:
    """``token_stats`` with the tokenizer ``tokenizer_source`` names (None, said on stderr, when
    there is none); warns on stderr about rows longer than ``max_length``."""
    source = tokenizer_source(run, tokenizer)
    if source is None:
        print("dataset.export: no tokenizer to count tokens with (no --tokenizer, the run's teacher was not "
              "local and the embedded model is not prepared): pass --tokenizer NAME for token lengths and the "
              "card's max_length", file=sys.stderr)
        return None
    stats = token_stats(rows, load_tokenizer(source), Path(source).name, max_length)
    over = stats.get("over_max_length", {})
    if over.get("rows"):
        print(f"warning: {over['rows']} of {stats['rows']} rows are longer than --max-length {max_length} tokens "
              f"(longest {stats['total']['max']} with {stats['tokenizer']}'s tokenizer): TRL's SFTTrainer would cut "
              f"their completions and drop the rows left without one; max_length={stats['max_length']} keeps "
              f"every row whole", file=sys.stderr)
    return stats


def _messages(msgs: list[dict]) -> list[dict]:
    return [{"role": m["role"], "content": m["content"]} for m in msgs]


def _prompts(run: RunDir, rows: list[dict], fmt: JudgmentFormat | None) -> dict[str, list[dict]]:
    """pair_id -> prompt messages: the teacher's own (without its answer), or re-rendered from the
    run's states in ``fmt``."""
    if fmt is None:
        return {r["pair_id"]: _messages(r["messages"])[:-1] for r in rows}
    states = run.states((r["traj_id"], r["step_idx"]) for r in rows)
    return {r["pair_id"]: render_pair(states[(r["traj_id"], r["step_idx"])], r["response_1"], r["response_2"],
                                      fmt=fmt)[0] for r in rows}


def export_trl(run_dir: str | Path, seed: int = 42, test_fraction: float = 0.2,
               fmt: JudgmentFormat | None = None, tokenizer: str | None = None,
               max_length: int | None = None, gmcp_ratio: float | None = None) -> dict[str, Path]:
    """Write the TRL prompt/completion train and test files; returns their paths by split. Their
    token lengths (``measure_tokens``) go into ``stats.json``. ``gmcp_ratio``: keep rows at that
    GMCP share over both splits (``dataset.gmcp_ratio``; the split is drawn on every row first)."""
    run = RunDir(run_dir)
    # discarded.parquet too: the report beside the export counts it, and a verify that stopped
    # between it and stats.json leaves a mixed run
    run.check_inputs("data.export.trl", run.root / "preferences.parquet", run.root / "discarded.parquet",
                     run.trajectories)
    every = load_preferences(run)
    test_tasks = split_tasks((r["task_id"] for r in every), seed, test_fraction)
    rows, rejects, rejected, ratio_entry = drop_to_ratio("data.export.trl", every, gmcp_ratio, seed,
                                                         "preferences.parquet")
    prompts = _prompts(run, rows, fmt)
    splits = {"train": [], "test": []}
    for r in rows:
        msgs = _messages(r["messages"])
        splits["test" if r["task_id"] in test_tasks else "train"].append({
            "prompt": prompts[r["pair_id"]], "completion": msgs[-1:], "pair_id": r["pair_id"], "task_id": r["task_id"],
            "rule": r["rule"], "axis": r["axis"], "label": r["label"]})
    paths = {}
    for name, split_rows in splits.items():
        paths[name] = run.root / TRL_DIR / f"{name}.parquet"
        atomic_write_parquet(paths[name], pa.Table.from_pylist(split_rows, schema=TRL_SCHEMA))
    stats = StageStats("data.export.trl", n_in=len(every), n_out=len(rows), rejected=rejected)
    stats.extra = {"train": len(splits["train"]), "test": len(splits["test"]),
                   "tasks": {"train": len({r["task_id"] for r in splits["train"]}), "test": len(test_tasks)},
                   "seed": seed, "test_fraction": test_fraction,
                   "files": {k: str(v.relative_to(run.root)) for k, v in paths.items()},
                   "tokens": measure_tokens(run, splits["train"] + splits["test"], tokenizer, max_length),
                   **ratio_entry}
    run.write_stage(stats, rejects)
    return paths


def export_trl_labels(run_dir: str | Path, seed: int = 42, test_fraction: float = 0.2,
                      coin_seed: int = 0, axtree_chars: int | None = None,
                      fmt: JudgmentFormat | None = None, tokenizer: str | None = None,
                      max_length: int | None = None, gmcp_ratio: float | None = None) -> dict[str, Path]:
    """Write the label-only TRL files (an ablation without rationales: see the module doc) from
    the sampled candidates; returns their paths by split. ``gmcp_ratio`` as ``export_trl``."""
    run = RunDir(run_dir)
    fmt = fmt or JudgmentFormat()
    if axtree_chars:
        fmt = JudgmentFormat(fmt.untrusted, fmt.template, axtree_chars)
    run.check_inputs("data.export.trl_labels", run.root / "candidates.parquet", run.trajectories)
    every = load_pairs(run, coin_seed, fmt)
    test_tasks = split_tasks((p.row["task_id"] for p in every), seed, test_fraction)
    pairs, rejects, rejected, ratio_entry = drop_to_ratio(
        "data.export.trl_labels", every, gmcp_ratio, seed, "candidates.parquet", is_gmcp=lambda p: bool(p.row["gmcp"]),
        pair_id=lambda p: p.row["pair_id"])
    splits = {"train": [], "test": []}
    for p in pairs:
        c = p.row
        splits["test" if c["task_id"] in test_tasks else "train"].append({
            "prompt": p.messages, "completion": [{"role": "assistant", "content": answer_text(p.label)}],
            "pair_id": c["pair_id"], "task_id": c["task_id"], "rule": c["rule"], "axis": c["axis"],
            "label": p.label, "traj_id": c["traj_id"], "step_idx": c["step_idx"], "site": c["site"],
            "gmcp": c["gmcp"]})
    paths = {}
    for name, split_rows in splits.items():
        split_rows.sort(key=lambda r: (r["traj_id"], r["step_idx"], r["pair_id"]))
        paths[name] = run.root / TRL_LABELS_DIR / f"{name}.parquet"
        atomic_write_parquet(paths[name], pa.Table.from_pylist(split_rows, schema=TRL_LABELS_SCHEMA))
    stats = StageStats("data.export.trl_labels", n_in=len(every), n_out=len(pairs), rejected=rejected)
    stats.extra = {"train": len(splits["train"]), "test": len(splits["test"]), "seed": seed,
                   "coin_seed": coin_seed, "test_fraction": test_fraction, "axtree_chars": fmt.budget,
                   "targets": "answer tag only (no teacher rationale)",
                   "files": {k: str(v.relative_to(run.root)) for k, v in paths.items()},
                   "tokens": measure_tokens(run, splits["train"] + splits["test"], tokenizer, max_length),
                   **ratio_entry}
    run.write_stage(stats, rejects)
    return paths


def export_trl_preference(run_dir: str | Path, seed: int = 42, test_fraction: float = 0.2,
                          axtree_chars: int | None = None, fmt: JudgmentFormat | None = None,
                          tokenizer: str | None = None, max_length: int | None = None,
                          gmcp_ratio: float | None = None) -> dict[str, Path]:
    """Write the conversational preference files (``dataset.preference``: prompt = the state,
    chosen = a+, rejected = a-) with the ``trl`` task split; returns their paths by split. The AXTree
    budget is the teacher's unless ``axtree_chars``; token lengths count both sequences of a pair."""
    run = RunDir(run_dir)
    run.check_inputs(preference.STAGE, run.root / "preferences.parquet", run.root / "discarded.parquet",
                     run.trajectories)
    every = load_preferences(run, ("action_pos", "action_neg"))
    test_tasks = split_tasks((r["task_id"] for r in every), seed, test_fraction)
    rows, rejects, rejected, ratio_entry = drop_to_ratio(preference.STAGE, every, gmcp_ratio, seed,
                                                         "preferences.parquet")
    fmt = fmt or JudgmentFormat()
    fmt = JudgmentFormat(fmt.untrusted, fmt.template, axtree_chars or preference.teacher_budget(run))
    splits = {"train": [], "test": []}
    for row in preference.preference_rows(run, rows, fmt):
        splits["test" if row["task_id"] in test_tasks else "train"].append(row)
    paths = preference.write_preference(run, splits, TRL_PREFERENCE_SCHEMA)
    stats = preference.stage_stats(len(every), splits, rejected, {
        "seed": seed, "test_fraction": test_fraction, "axtree_chars": fmt.budget,
        "files": {k: str(v.relative_to(run.root)) for k, v in paths.items()},
        "tokens": measure_tokens(run, preference.sequences(splits["train"] + splits["test"]), tokenizer, max_length),
        **ratio_entry})
    run.write_stage(stats, rejects)
    return paths


def export_webprmbench(run_dir: str | Path, seed: int = 42, test_fraction: float = 0.2,
                       split: str = "test", fmt: JudgmentFormat | None = None, gmcp_ratio: float | None = None) -> Path:
    """Write the WebPRMBench-format evaluation file (held-out tasks, or ``split='all'``);
    ``gmcp_ratio``: keep the exported pairs at that GMCP share (``dataset.gmcp_ratio``)."""
    run = RunDir(run_dir)
    run.check_inputs("data.export.webprmbench", run.root / "preferences.parquet", run.root / "discarded.parquet",
                     run.trajectories)
    rows = load_preferences(run, prmbench.REPLAY_COLUMNS)
    replayed = prmbench.is_replay_verified(rows)
    if replayed and gmcp_ratio is not None:
        raise ValueError("--gmcp-ratio does not apply to a replay-verified benchmark: dropping pairs would break "
                         f"its {prmbench.NEGATIVES_PER_STATE} negatives per state")
    if split == "test":
        test_tasks = split_tasks((r["task_id"] for r in rows), seed, test_fraction)
        chosen = [r for r in rows if r["task_id"] in test_tasks]
    elif split == "all":
        chosen = rows
    else:
        raise ValueError(f"split must be 'test' or 'all', not {split!r}")
    if replayed:      # WebPRMBench's shape: 4 replay-proven negatives per state (dataset.prmbench)
        chosen, rejects, states_short = prmbench.select_states(chosen, seed)
        rejected, ratio_entry = Counter(r.reason for r in rejects), {}
    else:
        chosen, rejects, rejected, ratio_entry = drop_to_ratio("data.export.webprmbench", chosen, gmcp_ratio, seed,
                                                               "preferences.parquet")
    chosen.sort(key=lambda r: (r["traj_id"], r["step_idx"], r["pair_id"]))
    prompts = _prompts(run, chosen, fmt)
    out, states, per_state = [], {}, {}
    for r in chosen:
        key = (r["traj_id"], r["step_idx"])
        state_idx = states.setdefault(key, len(states))
        pair_idx = per_state[state_idx] = per_state.get(state_idx, -1) + 1
        out.append({"state_idx": state_idx, "pair_idx": pair_idx, "expected": r["label"],
                    "prompt": prompts[r["pair_id"]], "source_name": f"surfprm/{r['site']}",
                    "pair_id": r["pair_id"], "task_id": r["task_id"], "rule": r["rule"], "axis": r["axis"],
                    "traj_id": r["traj_id"], "step_idx": r["step_idx"],
                    **(prmbench.bench_fields(r) if replayed else {})})
    path = run.root / WEBPRMBENCH_FILE
    schema = prmbench.replay_schema(WEBPRMBENCH_SCHEMA) if replayed else WEBPRMBENCH_SCHEMA
    atomic_write_parquet(path, pa.Table.from_pylist(out, schema=schema))
    held_in = len(rows) - len(out) - sum(rejected.values())
    stats = StageStats("data.export.webprmbench", n_in=len(rows), n_out=len(out),
                       rejected=rejected + Counter({"training_task": held_in} if held_in else {}))
    stats.extra = {"states": len(states), "split": split, "seed": seed, "test_fraction": test_fraction,
                   "file": str(WEBPRMBENCH_FILE), **ratio_entry,
                   **(prmbench.bench_stats(out, states_short) if replayed else {})}
    run.write_stage(stats, rejects)
    return path


def loss_line_of(run_dir: str | Path, fmt: str) -> str | None:
    """``data.loss``'s line for an export just written: rows dropped (``--gmcp-ratio``), a
    WebPRMBench file left empty by the split, or no pair to export, with why the teacher kept none."""
    stats = RunDir(run_dir).read_stats()
    key = "data.export." + fmt.replace("-", "_")
    s = stats.get(key)
    if not s or (fmt == "webprmbench" and s["out"]):         # held-out tasks only: smaller by design
        return None
    line = loss_line(key, s["in"], s["out"], s.get("rejected", {}), "pairs", why=EXPORT_LOSS_WHY)
    v = stats.get("teacher.verify")
    if line and not s["in"] and v and fmt != "trl-labels":
        from teacher.verify import LOSS_WHY

        line += "; " + (loss_line("teacher.verify", v.get("sampled", v["in"]), v["out"], v["rejected"],
                                  "sampled pairs", why=LOSS_WHY) or f"teacher.verify kept {v['out']}")
    return line


EXPORT_LOSS_WHY = {"training_task": "the pair's task is in the training split; --split all exports every pair",
                   "gmcp_ratio": "dropped to reach --gmcp-ratio", **prmbench.REASONS}


def export(run_dir: str | Path, fmt: str, seed: int = 42, test_fraction: float = 0.2, split: str = "test",
           card: bool = True, axtree_chars: int | None = None, preset: str = "heldout",
           judgment_format: JudgmentFormat | None = None, tokenizer: str | None = None,
           max_length: int | None = None, gmcp_ratio: float | None = None) -> list[Path]:
    """One export format, then (unless ``card=False``) the dataset card and the report.
    ``preset='paper'`` trains on every pair (no task held out) and evaluates on all of them;
    ``judgment_format`` re-renders the prompts (a template, fencing); ``tokenizer`` counts the TRL
    rows' tokens (default: the run's local teacher's); ``max_length`` warns about longer rows;
    ``gmcp_ratio`` drops rows to that GMCP share (``dataset.gmcp_ratio``)."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {PRESETS}, not {preset!r}")
    if preset == "paper":
        test_fraction, split = 0.0, "all"
    if fmt == "trl":
        paths = list(export_trl(run_dir, seed, test_fraction, judgment_format, tokenizer, max_length,
                                gmcp_ratio).values())
    elif fmt == "trl-labels":
        paths = list(export_trl_labels(run_dir, seed, test_fraction, axtree_chars=axtree_chars,
                                       fmt=judgment_format, tokenizer=tokenizer, max_length=max_length,
                                       gmcp_ratio=gmcp_ratio).values())
    elif fmt == "trl-preference":
        paths = list(export_trl_preference(run_dir, seed, test_fraction, axtree_chars, judgment_format, tokenizer,
                                           max_length, gmcp_ratio).values())
    elif fmt == "webprmbench":
        paths = [export_webprmbench(run_dir, seed, test_fraction, split, judgment_format, gmcp_ratio)]
    else:
        raise ValueError(f"format must be one of {FORMATS + PREFERENCE_FORMATS + ABLATION_FORMATS}, not {fmt!r}")
    if card:
        from dataset.card import write_card
        from dataset.report import write_report

        paths += [write_report(run_dir), write_card(run_dir)]
    return paths


@dataclass
class ExportOptions(Configurable):
    """What ``python -m dataset.export`` writes; every field is a flag (``cli.config``)."""

    ARG_GROUP = "export"

    format: list[str] = field(default_factory=list, metadata={
        "choices": FORMATS + PREFERENCE_FORMATS + ABLATION_FORMATS,
        "help": "trl, webprmbench, trl-preference (prompt/chosen/rejected for RewardTrainer, DPOTrainer) or "
                "trl-labels (label-only ablation, no teacher needed); several: --format trl --format webprmbench"})
    seed: int = field(default=42, metadata={"help": "seeds the task split"})
    test_fraction: float = field(default=0.2, metadata={"min": 0, "max": 1, "help": "share of tasks held out"})
    split: str = field(default="test", metadata={"choices": ("test", "all"),
                                                 "help": "webprmbench: held-out tasks or all"})
    axtree_chars: int | None = field(default=None, metadata={"min": 1, "deprecated": ("prompt_budget",),
        "help": "trl-labels: AXTree characters in the prompt (default: the teacher's; old name --prompt-budget)"})
    preset: str = field(default="heldout", metadata={
        "choices": PRESETS,
        "help": "heldout: hold out --test-fraction of the tasks; paper: train on every verified pair"})
    prompt_template: str | None = field(default=None, metadata={
        "metavar": "FILE", "help": "re-render the prompts with a YAML template (user, optional system)"})
    untrusted: str | None = field(default=None, metadata={
        "choices": UNTRUSTED_MODES,
        "help": "re-render the prompts with dataset text escaped (escape) or also fenced (fence)"})
    no_card: bool = field(default=False, metadata={"help": "skip the dataset card and the report"})
    tokenizer: str | None = field(default=None, metadata={
        "metavar": "NAME", "help": "trl, trl-labels: count tokens with this tokenizer (a folder or a cached model "
                                   "name; default: the run's local teacher's, the embedded model after `make run`)"})
    max_length: int | None = field(default=None, metadata={"min": 1,
        "metavar": "N", "help": "trl, trl-labels: warn about rows longer than N tokens (what SFTConfig(max_length=N) "
                                "would truncate)"})
    gmcp_ratio: float | None = field(default=None, metadata={"min": 0, "max": 1, "metavar": "R", "help": (
        "a controlled-GMCP dataset (surfPRM Table 6): drop rows, never duplicate, until the exported rows' GMCP "
        "share is R +- 0.02 over all splits together; the dropped rows are rejects (reason gmcp_ratio)")})
    push_to_hub: str | None = field(default=None, metadata={
        "metavar": "REPO", "help": "then push the card, every config's files and the report to the Hugging Face "
                                   "dataset repository REPO (dataset.hub; needs the network: HF_HUB_OFFLINE=0)"})
    hub_private: bool = field(default=False, metadata={"help": "--push-to-hub: create the repository private"})


def build_parser() -> CLIParser:
    ap = make_parser("python -m dataset.export", __doc__)
    ap.add_argument("--run", required=True, help="run directory holding preferences.parquet")
    ExportOptions.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    opts = ExportOptions.from_args(args)
    if not opts.format:
        ap.error("--format is required")
    require_run_dir(ap, args.run)
    judgment_format = None
    if opts.prompt_template or opts.untrusted:
        try:
            judgment_format = JudgmentFormat.from_options(opts.prompt_template, opts.untrusted or "escape")
        except ValueError as e:
            ap.error(str(e))
    try:
        for i, fmt in enumerate(opts.format):
            last = i == len(opts.format) - 1
            for p in export(args.run, fmt, opts.seed, opts.test_fraction, opts.split, card=last and not opts.no_card,
                            axtree_chars=opts.axtree_chars, preset=opts.preset, judgment_format=judgment_format,
                            tokenizer=opts.tokenizer, max_length=opts.max_length, gmcp_ratio=opts.gmcp_ratio):
                print(f"wrote {p}")
            if (line := loss_line_of(args.run, fmt)):
                print(line)
        if opts.push_to_hub:
            from dataset.hub import push_to_hub

            print(f"pushed {push_to_hub(args.run, opts.push_to_hub, opts.hub_private)}")
    except (FileNotFoundError, ValueError) as e:
        return error_exit(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
