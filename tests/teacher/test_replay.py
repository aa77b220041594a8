"""The replay verifier (``teacher.replay``, ``teacher.verify --verifier replay``) on real MiniWoB++
pages in Debian's chromium: one case per outcome, the run-level columns, and resume after a kill."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.env import CHROMIUM
from mined_run import write_mined_run
from teacher.replay import KEPT, MiniWoBBackend, ReplayConfig, Target, replay_target
from teacher.schema import DISCARD_SCHEMA, PREFERENCE_SCHEMA
from teacher.verify import VerifyConfig, verify

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]

ROOT = Path(__file__).resolve().parents[2]
SEED = 3      # click-button seed 3: [15] textbox, [17] button 'cancel', [19] button 'submit'


def _bid(axtree: str, role: str, name: str) -> str:
    return re.search(rf"\[(\w+)\] {role} '{name}'", axtree).group(1)


@pytest.fixture(scope="module")
def backend():
    envs = {}

    class Backend(MiniWoBBackend):      # the module's harness, reopened when the task changes (one at a time)
        def open(self, task):
            if task not in envs:
                for env in envs.values():
                    env.close()
                envs.clear()
                envs[task] = super().open(task)
            return envs[task]

        def solve_step(self, task, obs):
            return self.chooser(task, 0)(obs, [], "", 0)
    yield Backend()
    for env in envs.values():
        env.close()


@pytest.fixture(scope="module")
def click_button(backend):
    """The recorded O_1 of click-button and its submit, cancel and textbox bids."""
    obs = backend.open("click-button").reset(seed=SEED)
    assert "submit" in obs.goal
    return obs.axtree, {n: _bid(obs.axtree, r, n) for r, n in (("button", "submit"), ("button", "cancel"),
                                                               ("textbox", ""))}


def _replay(backend, axtree, pos, neg, task="click-button", seed=SEED, history=()):
    return replay_target(backend.open(task), backend, Target(task, seed, tuple(history), axtree, pos, neg),
                         ReplayConfig(solver_steps=5))


def test_string_form_of_the_positive_is_equivalent(backend, click_button):
    axtree, bid = click_button
    r = _replay(backend, axtree, f"click('{bid['submit']}')", f'click("{bid["submit"]}")')
    assert r.outcome == "equivalent" and not r.kept
    ev = r.evidence
    assert ev["pos"]["hash"] == ev["neg"]["hash"] and ev["pos"]["reward"] == ev["neg"]["reward"] == 1.0
    assert ev["pos"]["done"] and ev["step"] == 0 and ev["observation_hash"]


def test_equivalent_after_a_replayed_history(backend):
    """enter-text at step 1: the fill is replayed, then submit in two spellings."""
    obs = backend.open("enter-text").reset(seed=0)
    word = re.search(r'"([^"]+)"', obs.goal).group(1)
    fill = f"fill('{_bid(obs.axtree, 'textbox', '')}', '{word}')"
    after = backend.open("enter-text").step(fill)
    submit = _bid(after.axtree, "button", "Submit")
    r = _replay(backend, after.axtree, f"click('{submit}')", f"click(bid='{submit}')", "enter-text", 0, [fill])
    assert r.outcome == "equivalent" and r.evidence["step"] == 1 and r.evidence["pos"]["reward"] == 1.0


def test_clicking_the_other_button_is_harmful(backend, click_button):
    axtree, bid = click_button
    r = _replay(backend, axtree, f"click('{bid['submit']}')", f"click('{bid['cancel']}')")
    assert r.outcome == "harmful" and r.kept
    assert r.evidence["neg"]["done"] and r.evidence["neg"]["final_reward"] == 0.0
    assert r.evidence["pos"]["hash"] != r.evidence["neg"]["hash"]


def test_an_inert_click_then_the_solver_is_a_detour(backend, click_button):
    axtree, bid = click_button
    r = _replay(backend, axtree, f"click('{bid['submit']}')", f"click('{bid['']}')")
    assert r.outcome == "detour" and r.kept
    neg, pos = r.evidence["neg"], r.evidence["pos"]
    assert not neg["done"] and neg["finished"] and neg["solver_steps"] > pos["solver_steps"] == 0


def test_a_made_up_bid_is_not_executable(backend, click_button):
    axtree, bid = click_button
    r = _replay(backend, axtree, f"click('{bid['submit']}')", "click('9999')")
    assert r.outcome == "not_executable" and r.kept and "9999" in r.evidence["neg"]["error"]


def test_a_corrupted_recorded_observation_is_a_mismatch(backend, click_button):
    axtree, bid = click_button
    r = _replay(backend, axtree.replace("'submit'", "'sub mit'"), f"click('{bid['submit']}')",
                f"click('{bid['cancel']}')")
    assert r.outcome == "replay_mismatch" and not r.kept
    assert r.evidence["mismatch"] == "observation" and "pos" not in r.evidence


# -- the stage: columns, verdicts, resume --------------------------------------------------------------
def _make_run(root: Path, axtree: str, bid: dict) -> list[str]:
    """A run of one recorded click-button episode (seed 3) and four sampled pairs on its step 0."""
    from data.schema import AXIS_OF, RULES

    meta = json.dumps({"task": "click-button", "seed": SEED})
    base = {"source": "search", "site": "miniwob", "task_id": f"click-button.{SEED}", "traj_id": "r/click-button.3",
            "intent": 'Click on the "submit" button.', "url": "file:///x/miniwob/click-button.html",
            "obs_format": "indented", "html": None, "action_error": None, "thought": None, "success": True,
            "source_path": "tasks/click-button.3.jsonl", "meta": meta}
    pos = f"click('{bid['submit']}')"
    rows = [{**base, "step_idx": 0, "observation": axtree, "action": pos},
            {**base, "step_idx": 1, "observation": axtree, "action": None}]
    negs = [f'click("{bid["submit"]}")', f"click('{bid['cancel']}')", f"click('{bid['']}')", "click('9999')"]
    rules = RULES[:4]
    cands = [{"pair_id": f"{i:016x}", "site": "miniwob", "traj_id": base["traj_id"], "task_id": base["task_id"],
              "step_idx": 0, "rule": rule, "axis": AXIS_OF[rule], "action_pos": pos, "action_neg": neg, "gmcp": i == 1,
              "sampled": True, "pos_kind": "element", "pos_bid": bid["submit"], "pos_node": "p",
              "neg_bid": re.search(r"'(\w+)'|\"(\w+)\"", neg).group(0).strip("'\""), "neg_node": "n",
              "op_pos": "click", "op_neg": "click", "value_source": None, "evidence": "{}", "mode": "graph"}
             for i, (rule, neg) in enumerate(zip(rules, negs))]
    write_mined_run(root, rows, cands)
    return [c["pair_id"] for c in cands]


KILLER = """
import os, signal, sys
from teacher.replay import MiniWoBBackend, ReplayConfig
from teacher.verify import VerifyConfig, verify

class Dying(MiniWoBBackend):
    resets = 0

    def open(self, task):
        env, backend = super().open(task), self
        reset = env.reset

        def dying_reset(seed, **kw):
            backend.resets += 1
            if backend.resets == 4:     # the third pair's (a+ once for the step, then one per a-)
                os.kill(os.getpid(), signal.SIGKILL)
            return reset(seed=seed, **kw)
        env.reset = dying_reset
        return env

verify(sys.argv[1], VerifyConfig(verifier="replay"), progress=False,
       replay_config=ReplayConfig(solver_steps=5, cache_dir=sys.argv[2]), replay_backend=Dying())
"""


class Counting:
    """The module's backend, counting the resets (one per step's a+, one per pair's a-)."""

    def __init__(self, inner):
        self.inner, self.resets, self.name, self.version = inner, 0, inner.name, inner.version

    def check(self, tasks):
        self.inner.check(tasks)

    def chooser(self, task, rollout):
        return self.inner.chooser(task, rollout)

    def open(self, task):
        env, outer = self.inner.open(task), self

        class Env:
            def __getattr__(self, name):
                return getattr(env, name)

            def reset(self, seed, **kw):
                outer.resets += 1
                return env.reset(seed=seed, **kw)

            def close(self):
                pass
        return Env()


def test_stage_writes_outcomes_and_resumes_after_a_kill(backend, click_button, tmp_path):
    axtree, bid = click_button
    root = tmp_path / "run"
    ids = _make_run(root, axtree, bid)
    replay = ReplayConfig(solver_steps=5, cache_dir=str(tmp_path / "replay_cache"))
    killed = subprocess.run([sys.executable, "-c", KILLER, str(root), replay.cache_dir], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (root / "preferences.parquet").exists()

    counting = Counting(backend)
    stats = verify(root, VerifyConfig(verifier="replay"), progress=False, replay_config=replay,
                   replay_backend=counting)
    r = stats.extra["replay"]
    # the two pairs finished before the kill are not replayed again: a+ once, then the two a-
    assert (r["cached"], r["replayed"], counting.resets) == (2, 2, 3)
    assert r["outcomes"] == {"detour": 1, "equivalent": 1, "harmful": 1, "not_executable": 1}
    kept, disc = (pq.read_table(root / f).to_pylist() for f in ("preferences.parquet", "discarded.parquet"))
    assert pq.read_schema(root / "preferences.parquet").equals(PREFERENCE_SCHEMA)
    assert pq.read_schema(root / "discarded.parquet").equals(DISCARD_SCHEMA)
    by_id = {row["pair_id"]: row for row in kept + disc}
    assert set(by_id) == set(ids)
    assert [by_id[i]["replay_outcome"] for i in ids] == ["equivalent", "harmful", "detour", "not_executable"]
    assert {row["replay_outcome"] for row in kept} <= set(KEPT) and [d["reason"] for d in disc] == ["equivalent"]
    for row in kept + disc:
        (v,) = row["verdicts"]
        assert v["mode"] == "replay" and row["teacher_model"] == "replay:miniwob-solver"
        ev = json.loads(row["replay_evidence"])
        assert {"pos", "neg", "observation_hash"} <= set(ev) and ev["pos"]["hash"]
    assert disc[0]["verdicts"][0]["verdict"] is None and all(k["judgment"].startswith("<Answer>") for k in kept)
    first = (root / "preferences.parquet").read_bytes(), (root / "discarded.parquet").read_bytes()
    again = verify(root, VerifyConfig(verifier="replay"), progress=False, replay_config=replay,
                   replay_backend=Counting(backend))
    assert again.extra["replay"]["cached"] == 4 and "replayed" not in again.extra["replay"]
    assert first == ((root / "preferences.parquet").read_bytes(), (root / "discarded.parquet").read_bytes())

    # the card and the report take the outcomes as they take a teacher's verdicts
    from dataset.card import body
    from dataset.report import collect, render_markdown

    report = render_markdown(collect(root))
    assert "## Replay outcomes (ground truth)" in report
    (total,) = [line for line in report.splitlines() if line.startswith("| **all**")]
    assert [c.strip() for c in total.strip("|").split("|")][1:6] == ["1", "1", "1", "1", "0"]
    assert "25% [" in total         # 1 equivalent of 4: the false-negative rate and its interval
    card = body(root)
    assert "**Replay-verified**" in card and "`equivalent` 1" in card


# -- workers: the same outputs as one worker, the cache shared ---------------------------------------
# Two episodes, one per worker (four pairs each: the test replays each pair twice, ~12 minutes at
# load 20 with a third, two-step episode).
EPISODES = (("click-button", 3), ("click-button", 5))


def _solver_run(root: Path, backend) -> list[str]:
    """A run of the solver's episodes ``EPISODES`` (recorded on the module's harness) and, at every
    step, four sampled pairs: the positive in another spelling, two other elements clicked, a
    made-up bid."""
    from data.schema import AXIS_OF, RULES

    rows, cands = [], []
    for task, seed in EPISODES:
        env = backend.open(task)
        obs, steps = env.reset(seed=seed), []
        while not env.task_done and len(steps) < 5:
            action = backend.solve_step(task, obs)
            steps.append((obs, action))
            obs = env.step(action)
        assert env.evaluate()[0] == 1.0, (task, seed)
        traj = f"r/{task}.{seed}"
        base = {"source": "search", "site": "miniwob", "task_id": f"{task}.{seed}", "traj_id": traj,
                "intent": obs.goal, "url": f"file:///x/miniwob/{task}.html", "obs_format": "indented", "html": None,
                "action_error": None, "thought": None, "success": True, "source_path": f"tasks/{task}.{seed}.jsonl",
                "meta": json.dumps({"task": task, "seed": seed})}
        rows += [{**base, "step_idx": i, "observation": o.axtree, "action": a} for i, (o, a) in enumerate(steps)]
        rows.append({**base, "step_idx": len(steps), "observation": obs.axtree, "action": None})
        for i, (o, pos) in enumerate(steps):
            pos_bid = re.search(r"'(\w+)'", pos).group(1)
            others = [b for b in re.findall(r"^\s*\[(\w+)\]", o.axtree, re.M) if b != pos_bid][:2]
            negs = [pos.replace(f"'{pos_bid}'", f'"{pos_bid}"', 1), *(f"click('{b}')" for b in others), "click('9999')"]
            cands += [{"pair_id": hashlib.sha256(f"{traj}/{i}/{neg}".encode()).hexdigest()[:16], "site": "miniwob",
                       "traj_id": traj, "task_id": base["task_id"], "step_idx": i, "rule": RULES[k],
                       "axis": AXIS_OF[RULES[k]], "action_pos": pos, "action_neg": neg, "gmcp": False, "sampled": True,
                       "pos_kind": "element", "pos_bid": pos_bid, "pos_node": "p",
                       "neg_bid": re.search(r"""['"](\w+)['"]""", neg).group(1), "neg_node": "n",
                       "op_pos": pos.split("(")[0], "op_neg": "click", "value_source": None, "evidence": "{}",
                       "mode": "graph"} for k, neg in enumerate(negs)]
    write_mined_run(root, rows, cands)
    return [c["pair_id"] for c in cands]


def _outputs(root: Path) -> tuple[bytes, bytes, dict]:
    rows = [r for f in ("preferences.parquet", "discarded.parquet") for r in pq.read_table(root / f).to_pylist()]
    return ((root / "preferences.parquet").read_bytes(), (root / "discarded.parquet").read_bytes(),
            {r["pair_id"]: r["replay_outcome"] for r in rows})


def _same_outputs(a: Path, b: Path) -> bool:
    """The same bytes; or, where either run retried a replay after a Playwright timeout (a loaded
    machine: the evidence counts its ``attempts``), the same rows but for that count."""
    if _outputs(a) == _outputs(b):
        return True

    def rows(root):
        out = []
        for f in ("preferences.parquet", "discarded.parquet"):
            for r in pq.read_table(root / f).to_pylist():
                evidence = json.loads(r["replay_evidence"] or "{}")
                r["retried"] = evidence.pop("attempts", 1) > 1
                r["replay_evidence"] = evidence
                out.append(r)
        return out
    ra, rb = rows(a), rows(b)
    return any(r["retried"] for r in ra + rb) and \
        [{**r, "retried": None} for r in ra] == [{**r, "retried": None} for r in rb]


def test_two_workers_write_what_one_writes_and_share_the_cache(backend, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    ids = _solver_run(one, backend)
    shutil.copytree(one, two)
    assert len(ids) == 8
    single = verify(one, VerifyConfig(verifier="replay"), progress=False,
                    replay_config=ReplayConfig(solver_steps=5, no_cache=True, workers=1),
                    replay_backend=Counting(backend))
    cache = tmp_path / "replay_cache"
    replay = ReplayConfig(solver_steps=5, cache_dir=str(cache), workers=2)
    double = verify(two, VerifyConfig(verifier="replay"), progress=False, replay_config=replay)
    assert single.extra["replay"]["replayed"] == double.extra["replay"]["replayed"] == len(ids)
    first = _outputs(two)
    assert _same_outputs(two, one)      # the same bytes (up to timeout retries), the same outcome for every pair
    assert set(first[2]) == set(ids) and {"equivalent", "harmful", "not_executable"} <= set(first[2].values())
    assert double.n_in == double.n_out + sum(double.rejected.values()) == len(ids)
    # each pair's outcome stored once, whole, by whichever worker replayed it; a rerun replays nothing
    assert len(list(cache.glob("*/*.json"))) == len(ids) and not list(cache.glob("*/.*.tmp"))
    again = verify(two, VerifyConfig(verifier="replay"), progress=False, replay_config=replay)
    assert again.extra["replay"]["cached"] == len(ids) and "replayed" not in again.extra["replay"]
    assert _outputs(two) == first
