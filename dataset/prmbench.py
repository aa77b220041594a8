"""The offline PRM benchmark of a replay-verified run: ``dataset.export --format webprmbench`` on a run
that ``teacher.verify --verifier replay`` verified (``make prmbench-miniwob OUT=DIR``).

    python -m dataset.export --run RUN --format webprmbench --split all     # RUN/export/webprmbench.parquet

WebPRMBench's shape: per state the demonstrated action against ``NEGATIVES_PER_STATE`` (4)
negatives, one row per negative, ``state_idx`` unique across the file. A negative qualifies only
when its replay proved it worse (``BENCH_OUTCOMES``: ``harmful`` or ``detour``); ``not_executable``
negatives (a made-up or refused action) are kept in the training data but are too easy for a
benchmark. A pair whose replay evidence holds a Playwright timeout is left out too (``TIMEOUT_MARK``: an
action, the history's or the continuation's, outran BrowserGym's 500 ms on a loaded machine even
after ``teacher.replay``'s retries, so its outcome may be the load's, not the action's). A state
with more qualifying negatives gives a seeded sample of 4; a state with fewer is left out. Every
pair left out is a reject with its reason (``REASONS``), so that ``in = out + rejected`` holds over
the run's kept pairs.

``source_name`` is ``miniwob/<task>``: ``prm.evaluate`` reports each MiniWoB++ task as a source and
the macro over tasks. Rows carry ``replay_outcome`` and ``replay_evidence`` (the two sides' state
hashes, rewards and the continuation's steps) and both actions.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pyarrow as pa

from data.rundir import Reject

STAGE = "data.export.webprmbench"
NEGATIVES_PER_STATE = 4          # WebPRMBench: the chosen action against four rejected ones per state
BENCH_OUTCOMES = ("harmful", "detour")
TIMEOUT_MARK = "TimeoutError"
REASONS = {"not_executable": "the negative did not run in the browser: too easy for a benchmark",
           "replay_timeout": "a browser action in its replay timed out: the outcome may be the machine's load",
           "state_short_of_negatives": f"its state has fewer than {NEGATIVES_PER_STATE} harmful or detour "
                                       "negatives",
           "surplus_negative": f"its state has more than {NEGATIVES_PER_STATE}; a seeded sample of "
                               f"{NEGATIVES_PER_STATE} is in the benchmark"}
REPLAY_COLUMNS = ("replay_outcome", "replay_evidence", "action_pos", "action_neg")


def is_replay_verified(rows: list[dict]) -> bool:
    """The run's kept pairs were replayed (``teacher.verify --verifier replay``), not judged by a model."""
    return any(r.get("replay_outcome") for r in rows)


def replay_schema(base: pa.Schema) -> pa.Schema:
    """The WebPRMBench schema with each row's replay outcome, evidence (JSON) and actions."""
    return pa.schema([*base, pa.field("replay_outcome", pa.string(), nullable=False),
                      pa.field("replay_evidence", pa.large_string(), nullable=False),
                      pa.field("action_pos", pa.string(), nullable=False),
                      pa.field("action_neg", pa.string(), nullable=False)])


def task_of(task_id: str) -> str:
    """The MiniWoB++ task of an episode's ``task_id`` (``<task>.<seed>``, ``miniwob.`` optional)."""
    name = task_id.removeprefix("miniwob.")
    head, _, tail = name.rpartition(".")
    return head if head and tail.isdigit() else name


def select_states(rows: list[dict], seed: int) -> tuple[list[dict], list[dict], int]:
    """(the benchmark's rows, 4 per state in state order; the rejects with their reasons; the number
    of states left out). A state's sample is seeded by ``seed`` and the state, so it does not
    move when other states come or go."""
    by_state: dict = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["traj_id"], r["step_idx"], r["pair_id"])):
        by_state[(r["traj_id"], r["step_idx"])].append(r)
    chosen, rejects, short = [], [], 0
    for (traj, step), pairs in by_state.items():
        timed_out = [r for r in pairs if TIMEOUT_MARK in (r.get("replay_evidence") or "")]
        good = [r for r in pairs if r["replay_outcome"] in BENCH_OUTCOMES and r not in timed_out]
        rejects += [_reject(r, "replay_timeout") for r in timed_out]
        rejects += [_reject(r, "not_executable") for r in pairs
                    if r["replay_outcome"] not in BENCH_OUTCOMES and r not in timed_out]
        if len(good) < NEGATIVES_PER_STATE:
            rejects += [_reject(r, "state_short_of_negatives") for r in good]
            short += 1
            continue
        picked = set(random.Random(f"{seed}/{traj}/{step}").sample(range(len(good)), NEGATIVES_PER_STATE))
        chosen += [r for i, r in enumerate(good) if i in picked]
        rejects += [_reject(r, "surplus_negative") for i, r in enumerate(good) if i not in picked]
    return chosen, rejects, short


def _reject(row: dict, reason: str) -> Reject:
    return Reject(STAGE, reason, "preferences.parquet", f"replay_outcome {row['replay_outcome']}: {REASONS[reason]}",
                  {"pair_id": row["pair_id"], "traj_id": row["traj_id"], "step_idx": row["step_idx"]})


def bench_fields(row: dict) -> dict:
    """A benchmark row's replay columns and its per-task source."""
    return {"source_name": f"miniwob/{task_of(row['task_id'])}", **{k: row[k] for k in REPLAY_COLUMNS}}


def bench_stats(out: list[dict], states_short: int) -> dict:
    """``stats.json``'s account of the benchmark: tasks, outcomes, the states left out."""
    return {"verifier": "replay", "negatives_per_state": NEGATIVES_PER_STATE, "bench_outcomes": list(BENCH_OUTCOMES),
            "tasks": len({r["source_name"] for r in out}), "outcomes": dict(Counter(r["replay_outcome"] for r in out)),
            "states_short": states_short}
