"""``python -m search.miniwob`` on real MiniWoB++ pages in Chromium (the miniwob wheel's files),
with scripted OpenAI-protocol policies and judges: the task's own reward says right (1) or wrong
(0); the tournament executes the judge's pick; resume reruns only an unfinished episode; the run's
``trajectories.parquet`` ingests back and grows graphs and negatives."""

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from miniwob_scripts import actions, bid, policy, quoted
from scripted_llm import scripted_server

from judgment.parse import parse_prompt
from search.miniwob import main

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]
TASKS = ["--tasks", "click-button", "miniwob.enter-text"]


def run_cli(out: Path, answer, *args, prm=None) -> tuple[int, dict | None, list]:
    """Run the CLI against scripted servers; (exit code, summary, requests the policy saw)."""
    seen = []

    def counted(payload):
        seen.append(payload)
        return answer(payload)

    servers = [scripted_server(counted)] + ([scripted_server(prm)] if prm else [])
    flags = ["--policy", "scripted", "--policy-base-url", servers[0].base_url, "--policy-no-cache",
             "--policy-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--out", str(out), "--max-steps", "4"]
    flags += (["--prm", "scripted-prm", "--prm-base-url", servers[1].base_url, "--prm-no-cache",
               "--prm-api-key-env", "SURFPRM_TEST_KEY_UNSET"] if prm else ["--prm", "none"])
    try:
        rc = main(flags + list(args))
    finally:
        for s in servers:
            s.shutdown()
    summary = out / "summary.json"
    return rc, json.loads(summary.read_text()) if summary.exists() else None, seen


def lines(out: Path, episode: str) -> list[dict]:
    return [json.loads(l) for l in (out / "tasks" / f"{episode}.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def right_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("miniwob") / "right"
    rc, summary, _ = run_cli(out, policy("right"), *TASKS, "--seeds", "0-1")
    assert rc == 0
    return out, summary


def test_a_right_policy_gets_the_tasks_reward_1(right_run):
    out, s = right_run
    assert s["per_task"]["miniwob.click-button"]["success_rate"] == 1.0
    assert s["per_task"]["miniwob.enter-text"]["success_rate"] == 1.0
    assert s["macro"]["success_rate"] == 1.0 and s["tasks"] == 4 and s["terminations"] == {"task_done": 4}
    for episode, steps in (("click-button.0", 1), ("click-button.1", 1), ("enter-text.0", 2), ("enter-text.1", 2)):
        rows = lines(out, episode)
        # a step whose action hit BrowserGym's 500 ms Playwright timeout (a loaded machine) did
        # nothing, and the policy acts again: only such steps come on top
        retried = sum("TimeoutError" in r["feedback"] for r in rows if r["type"] == "step")
        assert [r["type"] for r in rows] == ["step"] * (steps + retried) + ["result"]
        result = rows[-1]
        assert result["reward"] == 1.0 and result["eval_info"]["RAW_REWARD_GLOBAL"] > 0 and result["evaluated"]
        assert result["seed"] == int(episode[-1]) and quoted(result["intent"])      # the goal the seed drew
    # two seeds draw two goals
    assert lines(out, "click-button.0")[-1]["intent"] != lines(out, "click-button.1")[-1]["intent"]


def test_a_wrong_policy_gets_reward_0(tmp_path):
    rc, s, _ = run_cli(tmp_path / "wrong", policy("wrong"), *TASKS, "--seeds", "0")
    assert rc == 0 and s["macro"]["success_rate"] == 0.0 and s["terminations"] == {"task_done": 2}
    assert [lines(tmp_path / "wrong", e)[-1]["reward"] for e in ("click-button.0", "enter-text.0")] == [0.0, 0.0]


def test_the_tournament_executes_the_judges_pick(tmp_path):
    def three(payload):         # three buttons, the right one among them
        prompt = payload["messages"][-1]["content"]
        right = actions(prompt)["right"]
        tree = re.search(r"# Accessibility tree\n(.*?)\n\n# ", prompt, re.S).group(1)
        others = [f"click('{b}')" for b in re.findall(r"\[(\w+)\] button", tree) if f"click('{b}')" != right]
        return [f"```\n{a}\n```" for a in [others[0], right, *others[1:2]]][:payload["n"]]

    picks = []

    def judge(payload):         # prefers the click on the button the goal names
        parts = parse_prompt(payload["messages"])
        right = f"click('{bid(parts.axtree, 'button', quoted(parts.intent))}')"
        pick = 1 if parts.response_1 == right else 2
        picks.append((parts.response_1, parts.response_2, pick))
        return [f"<Answer>Response {pick}</Answer>"]

    out = tmp_path / "judged"
    rc, s, _ = run_cli(out, three, "--tasks", "click-button", "--seeds", "0-1", "--n", "3", prm=judge)
    assert rc == 0 and s["macro"]["success_rate"] == 1.0
    assert len(picks) == 4          # 3 candidates: 2 matches per episode
    for episode in ("click-button.0", "click-button.1"):
        step = lines(out, episode)[0]
        matches = step["bracket"]["matches"]
        assert len(matches) == 2 and step["judge_calls"] == 2
        for m in matches:           # every match went to the judge's pick
            assert m["winner"] == (m["a1"] if m["verdict"] == 1 else m["a2"])
        assert step["chosen"] == matches[-1]["winner"] and step["chosen"] in {p[p[2] - 1] for p in picks}


def test_resume_reruns_only_the_unfinished_episode(right_run, tmp_path):
    src, _ = right_run
    out = tmp_path / "resumed"
    shutil.copytree(src, out)
    (out / "tasks" / "enter-text.1.jsonl").write_text(json.dumps(lines(out, "enter-text.1")[0]) + "\n")   # cut off
    kept = {p.name: p.stat().st_mtime_ns for p in (out / "tasks").glob("*.jsonl") if p.name != "enter-text.1.jsonl"}
    rc, s, seen = run_cli(out, policy("right"), *TASKS, "--seeds", "0-1", "--resume")
    assert rc == 0 and s["macro"]["success_rate"] == 1.0 and s["tasks"] == 4
    assert len(seen) == 2 and all("Kanesha" in p["messages"][-1]["content"] for p in seen)   # enter-text seed 1 only
    assert kept == {p.name: p.stat().st_mtime_ns for p in (out / "tasks").glob("*.jsonl")
                    if p.name != "enter-text.1.jsonl"}
    table = pq.read_table(out / "trajectories.parquet")
    assert len(set(table.column("traj_id").to_pylist())) == 4          # resumed episodes kept
    run_ids = {t.split("/")[0] for t in table.column("traj_id").to_pylist()}
    assert run_ids == {json.loads((out / "run.json").read_text())["run_id"]}
    # other settings: refused before anything runs
    rc, _, seen = run_cli(out, policy("right"), *TASKS, "--seeds", "0-1", "--resume", "--n", "2")
    assert rc == 2 and not seen


def test_episodes_ingest_back_and_grow_graphs_and_negatives(right_run, tmp_path):
    from data.ingest import ingest
    from graph.build import build_graphs
    from llm import LLMConfig
    from llm.serve import fixed_answer, serve_in_thread
    from proposals.mine import MineConfig, mine

    out, _ = right_run
    run = tmp_path / "run"
    stats = ingest("canonical", [out / "trajectories.parquet"], run, quiet=True)
    recorded = sum(1 + sum(r["type"] == "step" for r in lines(out, e))      # steps + final observations
                   for e in ("click-button.0", "click-button.1", "enter-text.0", "enter-text.1"))
    assert stats.n_in == stats.n_out == recorded >= 2 * 2 + 2 * 3 and not stats.rejected
    rows = pq.read_table(run / "trajectories.parquet").to_pylist()
    by_traj = {}
    for r in rows:
        by_traj.setdefault(r["traj_id"].split("/")[1], []).append(r)
    for episode, steps in by_traj.items():
        steps.sort(key=lambda r: r["step_idx"])
        chosen = [l["chosen"] for l in lines(out, episode) if l["type"] == "step"]
        assert [r["action"] for r in steps] == chosen + [None]
        assert all(r["success"] is True and r["intent"] == lines(out, episode)[-1]["intent"] for r in steps)
        assert {r["site"] for r in steps} == {"miniwob"}     # data.sites' MiniWoB rule: one site, any install
    build_graphs(run, workers=1)
    assert {p.name for p in (run / "graphs").iterdir() if p.is_dir()} == {"miniwob"}
    pages = {n["url"] for n in pq.read_table(run / "graphs" / "miniwob" / "nodes.parquet").to_pylist()}
    assert pages == {"/click-button", "/enter-text"}            # the task page, not the wheel's install path
    server = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "scripted")
    try:
        mine(run, MineConfig(sample_size=50, seed=42), LLMConfig(base_url=server.base_url, model="scripted",
                                                            cache_dir=str(tmp_path / "llm")), workers=1)
    finally:
        server.shutdown()
    negatives = pq.read_table(run / "candidates.parquet").to_pylist()
    clicks = [c for c in negatives if c["task_id"].startswith("click-button.")]
    # another button of the same page: a grounded, minimally contrastive negative of the agent's click
    assert clicks and all(c["action_neg"] != c["action_pos"] for c in clicks)
    assert any(c["gmcp"] and c["action_neg"].startswith("click(") for c in clicks)
