"""The replay by steps on the lean harness decides what the replay it replaced decided: a fixed set of
mined pairs (``data/replay_fixed_set.json``: MiniWoB++ steps of solver demonstrations, graph
negatives) with the outcome the base commit's ``teacher.verify --verifier replay`` gave each. The
set and its outcomes are written by ``bench/replay.py --throughput --fixed-set`` (the bench that
times both codes on the same pairs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.env import CHROMIUM
from teacher.replay import MiniWoBBackend, ReplayConfig, ReplayVerifier, Target, steps

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]

FIXED = Path(__file__).resolve().parent / "data" / "replay_fixed_set.json"


class CountingBackend(MiniWoBBackend):
    """The MiniWoB++ backend, counting the harnesses (browsers) it opens."""

    opened = 0

    def open(self, task: str):
        self.opened += 1
        return super().open(task)


def test_outcomes_match_the_base_on_the_fixed_set():
    """Also: one browser replays the set's three tasks (``LeanHarness.retask``), with the outcomes
    the base got from a new browser per task."""
    rows = json.loads(FIXED.read_text())
    targets = [Target(r["task"], r["seed"], tuple(r["history"]), r["observation"], r["action_pos"], r["action_neg"])
               for r in rows]
    assert len({r["base_outcome"] for r in rows}) >= 2 and len(steps(targets)) < len(targets)
    assert len({t.task for t in targets}) >= 2
    backend = CountingBackend()
    verifier = ReplayVerifier(backend, ReplayConfig(no_cache=True, workers=1))
    got = [None] * len(targets)
    try:
        for step in steps(targets):
            for i, replay in zip(step, verifier([targets[i] for i in step])):
                got[i] = replay.outcome
    finally:
        verifier.close()
    assert {r["pair_id"]: o for r, o in zip(rows, got)} == {r["pair_id"]: r["base_outcome"] for r in rows}
    assert backend.opened == 1
