"""The offline PRM benchmark of a replay-verified run (``dataset.prmbench`` through ``dataset.export
--format webprmbench``): the selection of 4 replay-proven negatives per state, and a real build of
two states (a MiniWoB++ page in Chromium, the replay verifier, the export, ``datasets`` and
``prm.evaluate`` with a position-biased endpoint judge)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dataset.prmbench import NEGATIVES_PER_STATE, select_states, task_of
from harness.env import CHROMIUM
from mined_run import write_mined_run


def _pairs(traj: str, step: int, outcomes: list[str]) -> list[dict]:
    return [{"pair_id": f"{traj}-{step}-{i}", "traj_id": traj, "step_idx": step, "replay_outcome": o}
            for i, o in enumerate(outcomes)]


def test_four_proven_negatives_per_state_and_every_other_pair_is_a_counted_reject():
    rows = (_pairs("a", 0, ["harmful", "detour", "harmful", "harmful", "detour", "not_executable"])
            + _pairs("a", 1, ["harmful", "harmful", "detour", "not_executable", "not_executable"])
            + _pairs("b", 0, ["detour"] * 4))
    chosen, rejects, short = select_states(rows, seed=42)
    per_state = {}
    for r in chosen:
        per_state.setdefault((r["traj_id"], r["step_idx"]), []).append(r["replay_outcome"])
    assert {k: len(v) for k, v in per_state.items()} == {("a", 0): NEGATIVES_PER_STATE, ("b", 0): NEGATIVES_PER_STATE}
    assert all(o in ("harmful", "detour") for v in per_state.values() for o in v)
    assert short == 1
    reasons = {r.key["pair_id"]: r.reason for r in rejects}
    assert len(chosen) + len(rejects) == len(rows)          # in = out + rejected
    assert sorted(reasons.values()) == sorted(["not_executable"] * 3 + ["state_short_of_negatives"] * 3
                                              + ["surplus_negative"])
    # a state's sample depends on the seed and the state only, not on the other states
    again, _, _ = select_states(rows[:6], seed=42)
    assert [r["pair_id"] for r in again] == [r["pair_id"] for r in chosen if r["traj_id"] == "a"]
    other = {tuple(r["pair_id"] for r in select_states(rows[:6], seed=s)[0]) for s in range(8)}
    assert len(other) > 1


def test_a_replay_that_timed_out_is_no_benchmark_negative():
    rows = _pairs("a", 0, ["harmful", "detour", "harmful", "harmful", "not_executable"])
    for r in rows:
        r["replay_evidence"] = json.dumps({"neg": {"error": None}})
    rows[1]["replay_evidence"] = json.dumps({"neg": {"error": "TimeoutError: Locator.click: Timeout 500ms exceeded."}})
    rows[4]["replay_evidence"] = rows[1]["replay_evidence"]
    chosen, rejects, short = select_states(rows, seed=42)
    assert chosen == [] and short == 1                      # 3 clean proven negatives: the state is short
    assert sorted(r.reason for r in rejects) == ["replay_timeout", "replay_timeout"] + ["state_short_of_negatives"] * 3
    rows[1]["replay_evidence"] = rows[0]["replay_evidence"]
    chosen, rejects, _ = select_states(rows, seed=42)
    assert len(chosen) == NEGATIVES_PER_STATE and [r.reason for r in rejects] == ["replay_timeout"]


def test_task_of_episode_ids():
    assert task_of("click-tab.1001") == "click-tab"
    assert task_of("miniwob.book-flight.7") == "book-flight"
    assert task_of("choose-date-easy") == "choose-date-easy"


def test_the_cards_note_says_what_the_labels_mean_and_which_states_are_in():
    from dataset.card import _bench_note

    stats = {"data.export.webprmbench": {"verifier": "replay", "states": 3, "tasks": 2, "negatives_per_state": 4,
                                         "outcomes": {"harmful": 7, "detour": 5}, "states_short": 1},
             "teacher.verify": {"replay": {"backend": "solver"}}}
    note = _bench_note(stats)
    assert "3\nstates over 2 MiniWoB++ tasks" in note and "`detour` 5, `harmful` 7" in note
    assert "What it does not mean" in note and "no\nrandom sample" in note and "scripted solver" in note
    assert "per step were replayed" not in note
    stats["proposals.mine"] = {"config": {"sample_per_step": 5, "sample_min_per_step": 4}}
    assert "a seeded 5 per step were replayed" in _bench_note(stats)
    assert _bench_note({"data.export.webprmbench": {"states": 3}}) == ""          # teacher-verified: no note


# -- a real build: two recorded MiniWoB++ states, replayed --------------------------------------------
# click-tab seed 1: every other tab or link clicked fails the task (4+ harmful: a benchmark state);
# click-button seed 3: two other elements only (a state left out).
EPISODES = (("click-tab", 1), ("click-button", 3))


def _record_run(root: Path) -> None:
    """A run of the first solver step of each of ``EPISODES`` (recorded on the lean harness) and a pair
    per other printed element, clicked."""
    from data.schema import AXIS_OF, RULES
    from teacher.replay import MiniWoBBackend

    backend, rows, cands = MiniWoBBackend(), [], []
    for task, seed in EPISODES:
        env = backend.open(task)
        try:
            obs = env.reset(seed=seed)
            pos = backend.chooser(task, 0)(obs, [], "", 0)
            after = env.step(pos)
        finally:
            env.close()
        traj = f"r/{task}.{seed}"
        base = {"source": "search", "site": "miniwob", "task_id": f"{task}.{seed}", "traj_id": traj,
                "intent": obs.goal, "url": f"file:///x/miniwob/{task}.html", "obs_format": "indented", "html": None,
                "action_error": None, "thought": None, "success": True, "source_path": f"tasks/{task}.{seed}.jsonl",
                "meta": json.dumps({"task": task, "seed": seed})}
        rows += [{**base, "step_idx": 0, "observation": obs.axtree, "action": pos},
                 {**base, "step_idx": 1, "observation": after.axtree, "action": None}]
        pos_bid = re.search(r"'(\w+)'", pos).group(1)
        others = [b for b in re.findall(r"^\s*\[(\w+)\] (?:link|tab|button|textbox)", obs.axtree, re.M) if b != pos_bid]
        cands += [{"pair_id": f"{task}-{seed}-{b}", "site": "miniwob", "traj_id": traj, "task_id": base["task_id"],
                   "step_idx": 0, "rule": RULES[k % 6], "axis": AXIS_OF[RULES[k % 6]], "action_pos": pos,
                   "action_neg": f"click('{b}')", "gmcp": True, "sampled": True, "pos_kind": "element",
                   "pos_bid": pos_bid, "pos_node": "p", "neg_bid": b, "neg_node": "n", "op_pos": "click",
                   "op_neg": "click", "value_source": None, "evidence": "{}", "mode": "graph"}
                  for k, b in enumerate(others[:5])]
    write_mined_run(root, rows, cands)


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")
def test_replayed_run_exports_a_benchmark_that_loads_and_evaluates(tmp_path):
    import datasets

    from dataset.export import main as export_main
    from llm.serve import fixed_answer, serve_in_thread
    from prm.evaluate import main as evaluate_main
    from teacher.replay import ReplayConfig
    from teacher.verify import VerifyConfig, verify

    run = tmp_path / "run"
    _record_run(run)
    verify(run, VerifyConfig(verifier="replay"), progress=False,
           replay_config=ReplayConfig(solver_steps=3, no_cache=True, workers=1))
    assert export_main(["--run", str(run), "--format", "webprmbench", "--split", "all"]) == 0

    path = run / "export" / "webprmbench.parquet"
    bench = datasets.load_dataset("parquet", data_files=str(path), cache_dir=str(tmp_path / "hf"))["train"]
    assert bench.num_rows == NEGATIVES_PER_STATE and set(bench["state_idx"]) == {0}
    assert set(bench["source_name"]) == {"miniwob/click-tab"} and sorted(bench["pair_idx"]) == [0, 1, 2, 3]
    assert set(bench["replay_outcome"]) <= {"harmful", "detour"}
    for row in bench:
        evidence = json.loads(row["replay_evidence"])
        assert evidence["pos"]["reward"] == 1.0 and evidence["neg"]["action"] == row["action_neg"]
    stats = json.loads((run / "stats.json").read_text())["data.export.webprmbench"]
    assert stats["in"] == stats["out"] + sum(stats["rejected"].values())
    assert stats["states"] == 1 and stats["states_short"] == 1 and stats["rejected"]["state_short_of_negatives"] >= 1
    rejects = [json.loads(line) for line in (run / "rejects.jsonl").read_text().splitlines()]
    assert {r["reason"] for r in rejects if r.get("stage") == "data.export.webprmbench"} >= {"state_short_of_negatives"}
    assert "offline PRM benchmark with replay-verified labels" in (run / "README.md").read_text()

    judge = serve_in_thread(fixed_answer("<Answer>Response 1</Answer>"), "position-1")
    try:
        assert evaluate_main(["--bench", str(path), "--out", str(tmp_path / "eval" / "r.json"), "--base-url",
                              judge.base_url, "--model", "position-1", "--no-cache", "--max-retries", "0",
                              "--api-key-env", "SURFPRM_TEST_KEY_UNSET"]) == 0
    finally:
        judge.shutdown()
    result = json.loads((tmp_path / "eval" / "r.json").read_text())
    firsts = sum(e == 1 for e in bench["expected"])
    assert result["by_source"]["miniwob/click-tab"]["correct"] == firsts       # right exactly where a+ came first
    assert result["macro"]["bon"] == (firsts == NEGATIVES_PER_STATE)
    lo, hi = result["macro"]["pairwise_ci"]
    assert lo <= result["macro"]["pairwise"] <= hi
