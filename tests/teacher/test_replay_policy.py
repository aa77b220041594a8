"""``teacher.verify --verifier replay --replay-continuation policy``: a scripted policy behind the
OpenAI protocol finishes a real MiniWoB++ task (enter-text, Debian's chromium) after a+ and a-, two
seeded rollouts a side, and the outcome follows the success counts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.env import CHROMIUM

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]

SEED = 0        # enter-text seed 0: 'Enter "Myron" into the text field and press Submit.'


def policy_answer(request: dict) -> dict:
    """The scripted policy: an even seed (rollout 0) fills the goal's word when the field does not
    hold it, then submits; an odd seed (rollout 1) submits at once."""
    prompt = request["messages"][-1]["content"]
    word = re.search(r'Enter "([^"]+)"', prompt).group(1)
    box = re.search(r"\[(\w+)\] textbox '[^']*'(?: value='([^']*)')?", prompt)
    submit = re.search(r"\[(\w+)\] button 'Submit'", prompt).group(1)
    if request.get("seed", 0) % 2 == 0 and box.group(2) != word:
        action = f"fill('{box.group(1)}', '{word}')"
    else:
        action = f"click('{submit}')"
    return {"id": "p", "object": "chat.completion", "model": "scripted-policy",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"Next.\n```\n{action}\n```"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def _run(root: Path) -> dict[str, str]:
    """A run of enter-text seed 0's first step (a+ fills the word) and its three pairs; pair id -> a-."""
    from data.ingest import ingest
    from data.rundir import RunDir, StageStats
    from data.schema import AXIS_OF, CANDIDATE_SCHEMA, RULES, STORAGE_ORDER, TRAJECTORY_SCHEMA
    from harness.miniwob import miniwob_harness

    with miniwob_harness("enter-text", lean=True) as h:
        obs = h.reset(seed=SEED)
    word = re.search(r'"([^"]+)"', obs.goal).group(1)
    box = re.search(r"\[(\w+)\] textbox", obs.axtree).group(1)
    submit = re.search(r"\[(\w+)\] button 'Submit'", obs.axtree).group(1)
    pos = f"fill('{box}', '{word}')"
    base = {"source": "search", "site": "miniwob", "task_id": f"enter-text.{SEED}", "traj_id": "r/enter-text.0",
            "intent": obs.goal, "url": obs.url, "obs_format": "indented", "html": None, "action_error": None,
            "thought": None, "success": True, "source_path": "tasks/enter-text.0.jsonl",
            "meta": json.dumps({"task": "enter-text", "seed": SEED})}
    rows = [{**base, "step_idx": 0, "observation": obs.axtree, "action": pos},
            {**base, "step_idx": 1, "observation": obs.axtree, "action": None}]
    src = root.parent / "src.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=TRAJECTORY_SCHEMA).sort_by(STORAGE_ORDER), src)
    ingest("canonical", [src], root, quiet=True)
    negs = {"e0": f'fill("{box}", "{word}")', "d0": f"fill('{box}', 'wrong')", "h0": f"click('{submit}')"}
    cands = [{"pair_id": f"{pid:0>16}", "site": "miniwob", "traj_id": base["traj_id"], "task_id": base["task_id"],
              "step_idx": 0, "rule": RULES[i], "axis": AXIS_OF[RULES[i]], "action_pos": pos, "action_neg": neg,
              "gmcp": False, "sampled": True, "pos_kind": "element", "pos_bid": box, "pos_node": "p",
              "neg_bid": box, "neg_node": "n", "op_pos": "fill", "op_neg": neg.split("(")[0], "value_source": None,
              "evidence": "{}", "mode": "graph"} for i, (pid, neg) in enumerate(negs.items())]
    run = RunDir(root)
    run.check_inputs("proposals.mine", run.trajectories)
    pq.write_table(pa.Table.from_pylist(cands, schema=CANDIDATE_SCHEMA), root / "candidates.parquet")
    run.write_stage(StageStats("proposals.mine", n_in=len(cands), n_out=len(cands)), [])
    return {c["pair_id"]: c["action_neg"] for c in cands}


def test_policy_continuation_counts_rollout_successes(tmp_path, capsys):
    from llm.serve import serve_in_thread
    from teacher.verify import main

    root = tmp_path / "run"
    negs = _run(root)
    server = serve_in_thread(policy_answer, "scripted-policy")
    try:
        code = main(["--run", str(root), "--quiet", "--verifier", "replay", "--replay-continuation", "policy",
                     "--replay-rollouts", "2", "--replay-solver-steps", "3", "--replay-workers", "1",
                     "--replay-cache-dir", str(tmp_path / "replay"), "--replay-policy-base-url", server.base_url,
                     "--replay-policy-model", "scripted-policy", "--replay-policy-cache-dir", str(tmp_path / "llm"),
                     "--replay-policy-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--replay-policy-max-retries", "0"])
    finally:
        server.shutdown()
    assert code == 0, capsys.readouterr().err
    rows = [r for f in ("preferences.parquet", "discarded.parquet") for r in pq.read_table(root / f).to_pylist()]
    got = {r["pair_id"]: (r["replay_outcome"], json.loads(r["replay_evidence"])) for r in rows}
    assert set(got) == set(negs)
    # a+ filled the word: both rollouts submit it (rollout 1 submits at once, rollout 0 after no refill)
    pos = got["00000000000000d0"][1]["pos"]
    assert (pos["successes"], pos["rollouts"]) == (2, 2) and pos["finished"]
    # the positive in another spelling reaches its state: equivalent, no rollouts needed
    assert got["00000000000000e0"][0] == "equivalent" and "successes" not in got["00000000000000e0"][1]["neg"]
    # a wrong word: rollout 0 refills and submits (success), rollout 1 submits the wrong word: 1 of 2
    outcome, ev = got["00000000000000d0"]
    assert outcome == "detour" and (ev["neg"]["successes"], ev["neg"]["rollouts"]) == (1, 2)
    assert [r["finished"] for r in ev["neg"]["rollout_runs"]] == [True, False]
    # submitting the empty field ends the task failed
    outcome, ev = got["00000000000000h0"]
    assert outcome == "harmful" and ev["neg"]["done"] and ev["neg"]["successes"] == 0
    stats = json.loads((root / "stats.json").read_text())["teacher.verify"]
    assert stats["replay"]["continuation"] == "policy" and stats["replay"]["rollouts"] == 2
    assert stats["teacher_model"] == "replay:miniwob-policy"
