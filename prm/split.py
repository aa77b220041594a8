"""Held-out splits and samples for training and evaluating a PRM: tasks split by template, an
evaluation sample spread over states, and training sets filled to one size.

    train, heldout = split_by_template(task_ids, seed=42, test_fraction=0.25)
    bench_rows = sample_states(rows, n_pairs=24, seed=42)        # <= 2 pairs of each random state
    train_rows = fill_to(rows, 12, seed=42)                      # 12 rows, repeated when fewer

A template is a task without its seed suffix (``order-ipad-pro_14`` and ``order-ipad-pro_2`` are
one task), so a held-out template has no seed on the training side.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict

_SEED_SUFFIX = re.compile(r"_\d+$")


def task_template(task_id: str) -> str:
    """The task without its seed suffix (``workarena.servicenow.order-ipad-pro_14`` ->
    ``workarena.servicenow.order-ipad-pro``): seeds of one template are the same task."""
    return _SEED_SUFFIX.sub("", task_id)


def split_by_template(task_ids, seed: int = 42, test_fraction: float = 0.25) -> tuple[set[str], set[str]]:
    """(training task ids, held-out task ids): a seeded share of the templates is held out
    (``dataset.export.split_tasks`` over templates), so no template has seeds on both sides."""
    from dataset.export import split_tasks

    task_ids = set(task_ids)
    held = split_tasks({task_template(t) for t in task_ids}, seed, test_fraction)
    test = {t for t in task_ids if task_template(t) in held}
    return task_ids - test, test


def sample_states(rows: list[dict], n_pairs: int, seed: int, per_state: int = 2) -> list[dict]:
    """States ``(traj_id, step_idx)`` in a seeded random order, up to ``per_state`` pairs of each
    (a seeded pick), until ``n_pairs`` pairs are reached. A state holds ~5 mined pairs: taking
    them all would leave a handful of states, and the bootstrap (``prm.stats``) resamples states."""
    states: dict = defaultdict(list)
    for r in rows:
        states[(r["traj_id"], r["step_idx"])].append(r)
    keys = sorted(states)
    rng = random.Random(seed)
    rng.shuffle(keys)
    out: list[dict] = []
    for k in keys:
        if len(out) >= n_pairs:
            break
        pairs = sorted(states[k], key=lambda r: r["pair_id"])
        rng.shuffle(pairs)
        out += pairs[:min(per_state, n_pairs - len(out))]
    return out


def fill_to(rows: list[dict], n: int, seed: int) -> list[dict]:
    """``n`` rows: a seeded shuffle of ``rows``, repeated (each pass reshuffled) when there are fewer,
    so that training sets of different sizes get the same number of updates."""
    if not rows:
        return []
    rng, out = random.Random(seed), []
    while len(out) < n:
        batch = list(rows)
        rng.shuffle(batch)
        out += batch
    return out[:n]
