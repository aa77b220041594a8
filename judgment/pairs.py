"""The sampled candidate pairs of a run, ordered by a fair coin and rendered for judging.

``load_pairs(run, seed, fmt)`` reads the ``sampled`` rows of ``RUN/candidates.parquet``, finds
each pair's state ``s_t`` in ``trajectories.parquet`` (``RunDir.states``), puts the demonstrated
(positive) action at Response 1 or 2 by ``coin_label`` (``label`` = its position) and renders the
pair in the comparative-judgment format (``judgment.format``). The teacher verifies these pairs
(``teacher.verify``) and the label-only export trains on them (``dataset.export --format
trl-labels``): both see the same order and the same prompt for the same seed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import pyarrow.parquet as pq

from data.rundir import RunDir
from data.state import State
from judgment.format import JudgmentFormat, render_pair

PAIR_COLUMNS = ["pair_id", "site", "traj_id", "task_id", "step_idx", "rule", "axis", "gmcp",
                "action_pos", "action_neg"]


@dataclass(slots=True)
class Pair:
    """One sampled candidate pair, ordered and rendered."""

    row: dict                       # the candidate row (PAIR_COLUMNS)
    state: State
    label: int
    response_1: str
    response_2: str
    messages: list[dict]
    cut: dict


def coin_label(pair_id: str, seed: int) -> int:
    """The positive's position (1 or 2): a fair coin from a hash of the seed and the pair, so the
    order never depends on which pairs are judged together or in what order."""
    digest = hashlib.blake2b(f"{seed}\x1f{pair_id}".encode(), digest_size=8).digest()
    return 1 + (digest[0] & 1)


def load_pairs(run: RunDir, seed: int, fmt: JudgmentFormat, pair_ids: Collection[str] | None = None) -> list[Pair]:
    """The sampled pairs of a run in pair-id order, each with its state, label and prompt
    (``pair_ids``: only those, e.g. a shard of the verify-pairs flow; the others are not rendered)."""
    return list(iter_pairs(run, seed, fmt, pair_ids)[1])


def iter_pairs(run: RunDir, seed: int, fmt: JudgmentFormat, pair_ids: Collection[str] | None = None
               ) -> tuple[int, Iterator[Pair]]:
    """``load_pairs``' pairs as (how many, an iterator that renders each when it is reached): the
    candidates and their states are read here, the prompts on demand (``teacher.verify`` renders
    them while the first requests are in flight)."""
    path = run.root / "candidates.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run `python -m proposals.mine` first")
    # A row group at a time, and only the sampled rows become Python rows: a large pool's
    # candidates are ten times the sample (at 10x the paper's pool, read whole, +270 MB).
    cands = []
    with pq.ParquetFile(path) as f:
        for g in range(f.num_row_groups):
            group = f.read_row_group(g, columns=PAIR_COLUMNS + ["sampled"])
            cands += group.filter(group.column("sampled")).to_pylist()     # a null is not sampled (dropped)
    cands = sorted((c for c in cands if pair_ids is None or c["pair_id"] in pair_ids), key=lambda c: c["pair_id"])
    states = run.states((c["traj_id"], c["step_idx"]) for c in cands)

    def render(c: dict) -> Pair:
        state = states[(c["traj_id"], c["step_idx"])]
        label = coin_label(c["pair_id"], seed)
        r1, r2 = (c["action_pos"], c["action_neg"]) if label == 1 else (c["action_neg"], c["action_pos"])
        messages, cut = render_pair(state, r1, r2, fmt=fmt)
        c.pop("sampled")
        return Pair(c, state, label, r1, r2, messages, cut)
    return len(cands), map(render, cands)
