"""The replay verifier's rules without a browser (``teacher.replay``): the outcome from the two
branches' evidence, the AXTree comparison, and which trajectories are MiniWoB episodes."""

from __future__ import annotations

import json

import pytest

from teacher.replay import (
    MiniWoBBackend,
    NotReplayable,
    ReplayConfig,
    ReplayVerifier,
    Target,
    classify,
    episode_of,
    normalize_axtree,
    state_hash,
)


def branch(hash="h", reward=0.0, done=False, error=None, steps=0, finished=True):
    return {"hash": hash, "reward": reward, "done": done, "error": error, "solver_steps": steps,
            "finished": finished}


POS = branch("p", steps=1)      # a+ then one solver step finishes the task


@pytest.mark.parametrize("neg, outcome", [
    (branch("n", error="ValueError: Could not find element"), "not_executable"),
    (branch("p", steps=5, finished=False), "equivalent"),          # same state as a+: whatever follows
    (branch("n", steps=1), "equivalent"),                          # another state, same completed path
    (branch("n", steps=0), "equivalent"),                          # the solver finishes sooner
    (branch("n", steps=2), "detour"),                              # finishes, one step more
    (branch("n", reward=0.0, done=True, finished=False), "harmful"),   # the task ended failed
    (branch("n", steps=10, finished=False), "harmful"),            # the solver cannot finish
])
def test_classify(neg, outcome):
    assert classify(POS, neg) == outcome


def test_a_positive_the_solver_cannot_finish_from():
    """If only a- leads to a finished task, the pair is wrong (a false negative); if neither does,
    a- is harmful (no evidence it is as good)."""
    pos = branch("p", steps=10, finished=False)
    assert classify(pos, branch("n", steps=3)) == "equivalent"
    assert classify(pos, branch("n", steps=10, finished=False)) == "harmful"


def test_same_hash_but_other_reward_is_not_equivalent():
    pos = branch("p", reward=1.0, done=True, steps=0)
    assert classify(pos, branch("p", reward=0.0, done=True, finished=False)) == "harmful"


def test_normalization_ignores_the_checkout_path_and_trailing_blanks():
    a = "RootWebArea 'T', focused, url='file:///a/b/miniwob/click-button.html'\n\t[1] button 'x'  "
    b = "RootWebArea 'T', focused, url='file:///elsewhere/miniwob/click-button.html'\n\t[1] button 'x'"
    assert normalize_axtree(a) == normalize_axtree(b) != normalize_axtree(b.replace("'x'", "'y'"))
    assert state_hash(a) == state_hash(b) != state_hash(b.replace("\t[1]", "\t[2]"))
    assert normalize_axtree(b.replace("click-button", "click-test")) != normalize_axtree(b)


def test_episode_of():
    assert episode_of("t", json.dumps({"task": "miniwob.enter-text", "seed": 7})) == ("enter-text", 7)
    assert episode_of("click-button.3", json.dumps({"benchmark": "search.miniwob"})) == ("click-button", 3)
    assert episode_of("click-button.3", "{}") is None            # not known to be a MiniWoB episode
    assert episode_of("t", json.dumps({"task": "x", "seed": "3"})) is None and episode_of("t", "not json") is None


def test_tasks_without_a_solver_are_refused_before_any_replay():
    verifier = ReplayVerifier(MiniWoBBackend(), ReplayConfig(no_cache=True))
    ok = Target("click-button", 0, (), "", "click('1')", "click('2')")
    verifier.check([ok])
    with pytest.raises(NotReplayable, match="draw-circle"):
        verifier.check([ok, Target("draw-circle", 0, (), "", "click('1')", "click('2')")])


class FlakyEnv:
    """A one-button page whose click hits a Playwright timeout the first ``timeouts`` times."""

    def __init__(self, timeouts: int):
        self.timeouts, self.task_done, self.resets = timeouts, False, 0

    def _obs(self, error=""):
        from types import SimpleNamespace

        return SimpleNamespace(axtree="[1] button 'ok'" if not self.task_done else "done", goal="g",
                               last_action_error=error)

    def reset(self, seed, observe=True):
        self.task_done, self.resets = False, self.resets + 1
        return self._obs()

    def action_set(self):
        return {"click"}

    def refused(self, action):
        return None

    def step(self, action, observe=True):
        if action != "click('1')":
            return self._obs("ValueError: Could not find element")
        if self.timeouts:
            self.timeouts -= 1
            return self._obs("TimeoutError: Locator.click: Timeout 500ms exceeded.")
        self.task_done = True
        return self._obs()

    def evaluate(self):
        return (1.0 if self.task_done else 0.0), None


class NoSolver:
    def chooser(self, task, rollout):
        return lambda obs, history, feedback, step: None


@pytest.mark.parametrize("timeouts, outcome, attempts", [(0, "not_executable", 1), (1, "not_executable", 2),
                                                         (5, "replay_mismatch", 3)])
def test_a_timed_out_replay_is_replayed_again(timeouts, outcome, attempts):
    """A load-induced timeout of a+ is replayed away; one that recurs every time stands."""
    from teacher.replay import TIMEOUT_RETRIES, replay_target

    env = FlakyEnv(timeouts)
    r = replay_target(env, NoSolver(), Target("t", 0, (), "[1] button 'ok'", "click('1')", "click('2')"),
                      ReplayConfig())
    assert (r.outcome, r.evidence["attempts"]) == (outcome, attempts) and attempts <= TIMEOUT_RETRIES + 1
    assert env.resets == attempts + (outcome != "replay_mismatch")     # two resets per finished attempt


def test_steps_group_pairs_by_task_seed_history_and_positive():
    from teacher.replay import steps

    targets = [Target(task, seed, hist, "", pos, "b") for task, seed, hist, pos in
               (("b", 1, (), "a"), ("a", 2, ("x",), "a"), ("b", 1, (), "a"), ("a", 0, (), "a"), ("a", 2, (), "a"),
                ("a", 2, ("x",), "a"), ("a", 2, ("x",), "c"))]
    assert steps(targets) == [[3], [4], [1, 5], [6], [0, 2]]
