"""The replay verifier's rules without a browser (``teacher.replay``): the outcome from the two
branches' evidence, the AXTree comparison, and which trajectories are MiniWoB episodes."""

from __future__ import annotations

import json

import pytest

from teacher.replay import (MiniWoBBackend, NotReplayable, ReplayConfig, ReplayVerifier, Target, classify,
                            episode_of, normalize_axtree, state_hash)


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
