"""The ``trl-preference`` export: conversational preference rows for TRL's ``RewardTrainer`` and
``DPOTrainer``.

    python -m dataset.export --run RUN --format trl-preference [--tokenizer NAME]

One row per kept pair, ``RUN/export/trl-preference/{train,test}.parquet`` (the same task split as
``trl``): ``prompt`` = [system, user] asking for the next action in the state ``s_t`` (intent,
AXTree, the actions so far, start and current URL: the sections of the teacher's prompt, the same
AXTree budget and escaping, without the two responses), ``chosen`` = [assistant: a⁺] and
``rejected`` = [assistant: a⁻], the demonstrated action and the grounded negative as raw BrowserGym
actions. The teacher's judgment is not in these rows: a reward model or a DPO policy learns which
action is better, not why.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from data.rundir import RunDir, StageStats, atomic_write_parquet
from judgment.format import DEFAULT_BUDGET, RESPONSES_HEADER, JudgmentFormat, recorded_axtree_chars, render_pair

STAGE = "data.export.trl_preference"
TRL_PREFERENCE_DIR = Path("export") / "trl-preference"

POLICY_SYSTEM = (
    "You are a web-browsing assistant. Given the task, the current page's accessibility tree (AXTree), "
    "the actions taken so far and the URLs, answer with the one best next action in BrowserGym's action "
    "grammar: click('12'), fill('34', 'text'), select_option('5', 'Blue'), scroll(0, 200), go_back(), "
    "send_msg_to_user('...'), ...")
NEXT_ACTION = "#### Next action ####\nAnswer with one action and nothing else."


def preference_schema(message: pa.DataType, pair_keys: list[pa.Field]) -> pa.Schema:
    """The pinned schema of the preference files (``message``: export's chat message struct)."""
    return pa.schema([
        pa.field("prompt", pa.list_(message), nullable=False),
        pa.field("chosen", pa.list_(message), nullable=False),
        pa.field("rejected", pa.list_(message), nullable=False),
        *pair_keys,
        pa.field("traj_id", pa.string(), nullable=False),
        pa.field("step_idx", pa.int32(), nullable=False),
    ])


def state_prompt(state, action_pos: str, action_neg: str, fmt: JudgmentFormat) -> list[dict]:
    """[system, user]: the state as the teacher's prompt shows it (``render_pair``: the AXTree
    budget around both targets, untrusted text escaped or fenced), asking for the next action."""
    if fmt.template is not None:
        raise ValueError("trl-preference renders the state in its own prompt; --prompt-template applies to "
                         "trl and webprmbench")
    user = render_pair(state, action_pos, action_neg, fmt=fmt)[0][-1]["content"]
    state_text = user.split("\n\n" + RESPONSES_HEADER, 1)[0]
    return [{"role": "system", "content": POLICY_SYSTEM}, {"role": "user", "content": f"{state_text}\n\n{NEXT_ACTION}"}]


def teacher_budget(run: RunDir) -> int:
    """The AXTree characters the run's teacher saw (``teacher.verify``'s recorded format)."""
    return recorded_axtree_chars(run.read_stats().get("teacher.verify", {}).get("config", {})) or DEFAULT_BUDGET


def preference_rows(run: RunDir, rows: list[dict], fmt: JudgmentFormat) -> list[dict]:
    """One preference row per kept pair (``rows``: ``preferences.parquet`` rows with the pair keys)."""
    states = run.states((r["traj_id"], r["step_idx"]) for r in rows)
    return [{"prompt": state_prompt(states[(r["traj_id"], r["step_idx"])], r["action_pos"], r["action_neg"], fmt),
             "chosen": [{"role": "assistant", "content": r["action_pos"]}],
             "rejected": [{"role": "assistant", "content": r["action_neg"]}],
             "pair_id": r["pair_id"], "task_id": r["task_id"], "rule": r["rule"], "axis": r["axis"],
             "traj_id": r["traj_id"], "step_idx": r["step_idx"]} for r in rows]


def write_preference(run: RunDir, splits: dict[str, list[dict]], schema: pa.Schema) -> dict[str, Path]:
    """Write the split files; returns their paths by split."""
    paths = {}
    for name, split_rows in splits.items():
        paths[name] = run.root / TRL_PREFERENCE_DIR / f"{name}.parquet"
        atomic_write_parquet(paths[name], pa.Table.from_pylist(split_rows, schema=schema))
    return paths


def sequences(rows: list[dict]) -> list[dict]:
    """The two sequences of every row as prompt/completion rows, for ``dataset.export.token_stats``
    (a trainer tokenizes prompt + chosen and prompt + rejected)."""
    return [{"pair_id": r["pair_id"], "prompt": r["prompt"], "completion": r[side]}
            for r in rows for side in ("chosen", "rejected")]


def stage_stats(n_in: int, splits: dict[str, list[dict]], rejected, extra: dict) -> StageStats:
    stats = StageStats(STAGE, n_in=n_in, n_out=sum(len(v) for v in splits.values()), rejected=rejected)
    stats.extra = {"train": len(splits["train"]), "test": len(splits["test"]), **extra}
    return stats
