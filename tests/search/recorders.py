"""Recorders for the search tests: a harness that keeps the actions it ran, and a PRM judge
factory that keeps every pair it judged with the verdict."""

from data.state import State
from harness.env import BrowserHarness
from search.tournament import prm_pair_judge


class Recording(BrowserHarness):
    """A ``BrowserHarness`` that records every action it executes in ``executed``."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.executed = []

    def step(self, action):
        self.executed.append(action)
        return super().step(action)


def recording_judge_for(judge, judged: list, budget: int = 1500):
    """``judge_for`` over a ``prm.judge`` judge (goal, AXTree, URL, history); appends
    ``((a1, a2), verdict)`` to ``judged`` for every judged pair."""
    def judge_for(obs, history):
        inner = prm_pair_judge(judge, State(intent=obs.goal, axtree=obs.axtree, url=obs.url, history=list(history)),
                               budget=budget)

        def call(pairs):
            verdicts = inner(pairs)
            judged.extend(zip(pairs, verdicts))
            return verdicts
        return call
    return judge_for
