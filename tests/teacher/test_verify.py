"""Teacher verification: the K-attempt logic against a scripted OpenAI-protocol teacher on
127.0.0.1 (outcomes, truncation, outages, resume, SIGKILL mid-run, templates). The format itself is
tested in tests/judgment/test_judgment.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from judgment.pairs import coin_label
from judgment.parse import parse_prompt
from scripted_teacher import ScriptedTeacher, judgment, llm_config, make_run, start
from teacher.schema import DISCARD_SCHEMA, PREFERENCE_SCHEMA
from teacher.verify import VerifyConfig, verify

ROOT = Path(__file__).resolve().parents[2]

def test_coin_is_fair_and_seeded():
    labels = [coin_label(f"{i:016x}", 0) for i in range(2000)]
    assert set(labels) == {1, 2} and 900 < labels.count(1) < 1100
    assert labels == [coin_label(f"{i:016x}", 0) for i in range(2000)]
    assert labels != [coin_label(f"{i:016x}", 1) for i in range(2000)]


# -- the K-attempt logic against a scripted server ------------------------------------------------------
@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify_run")
    return root, make_run(root)


@pytest.fixture
def run(base_run, tmp_path):
    """A fresh copy of the small run (the module's ingest is reused)."""
    src, pairs = base_run
    dst = tmp_path / "run"
    dst.mkdir()
    for name in ("trajectories.parquet", "candidates.parquet", "stats.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst, pairs


@pytest.fixture
def teacher(run):
    t = ScriptedTeacher(run[1])
    server = start(t)
    t.server = server
    yield t
    t.release.set()
    server.shutdown()


def _rows(path):
    return {r["pair_id"]: r for r in pq.read_table(path).to_pylist()}


def test_attempt_outcomes(run, teacher, tmp_path):
    root, pairs = run
    ids = [p["pair_id"] for p in pairs]
    teacher.script = {ids[0]: ["agree"],
                      ids[1]: ["disagree", "unparsed", "agree"],
                      ids[2]: ["disagree"] * 5,
                      ids[3]: ["unparsed", "disagree", "unparsed", "disagree", "unparsed"],
                      ids[4]: ["truncated", "bare"],
                      ids[5]: ["truncated", "unparsed", "truncated", "disagree", "truncated"]}
    stats = verify(root, VerifyConfig(), llm_config(teacher.server, tmp_path / "cache"), progress=False)
    kept, disc = _rows(root / "preferences.parquet"), _rows(root / "discarded.parquet")
    assert pq.read_schema(root / "preferences.parquet").equals(PREFERENCE_SCHEMA)
    assert pq.read_schema(root / "discarded.parquet").equals(DISCARD_SCHEMA)
    assert set(kept) == {ids[0], ids[1], ids[4]} and set(disc) == {ids[2], ids[3], ids[5]}

    first = kept[ids[0]]
    assert first["attempts"] == 1 and first["judgment"] == judgment(first["label"])
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant"]
    assert first["messages"][2]["content"] == first["judgment"]
    pos_first = first["response_1"] if first["label"] == 1 else first["response_2"]
    assert pos_first == first["action_pos"]
    third = kept[ids[1]]
    assert third["attempts"] == 3
    assert [v["outcome"] for v in third["verdicts"]] == ["disagree", "unparsed", "agree"]
    assert [v["seed"] for v in third["verdicts"]] == [0, 1, 2]
    assert third["verdicts"][1]["verdict"] is None and third["verdicts"][2]["verdict"] == third["label"]
    # a bare answer tag is a valid answer (the other sections are requested, not required);
    # a cut-off generation is its own outcome and uses an attempt
    assert kept[ids[4]]["attempts"] == 2
    assert kept[ids[4]]["judgment"] == f"<Answer>Response {kept[ids[4]]['label']}</Answer>"
    assert [v["outcome"] for v in kept[ids[4]]["verdicts"]] == ["truncated", "agree"]

    assert disc[ids[2]]["reason"] == "all_attempts_disagree" and disc[ids[2]]["attempts"] == 5
    assert len(disc[ids[2]]["texts"]) == 5
    assert disc[ids[3]]["reason"] == "no_agreement"
    assert disc[ids[5]]["reason"] == "no_agreement"

    assert stats.n_in == 6 and stats.n_out == 3 and stats.extra["pending"] == 0 and stats.extra["sampled"] == 6
    assert dict(stats.rejected) == {"all_attempts_disagree": 1, "no_agreement": 2}
    assert stats.extra["kept_at_attempt"] == {"1": 1, "2": 1, "3": 1}
    assert stats.extra["verdict_outcomes"] == {"agree": 3, "disagree": 1 + 5 + 2 + 1, "truncated": 1 + 3,
                                               "unparsed": 1 + 3 + 1}
    assert stats.extra["sections_missing"] == {"Analysis": 1, "Criteria": 1, "think": 1}   # the bare tag
    assert len(teacher.answered) == 1 + 3 + 5 + 5 + 2 + 5 == stats.extra["calls_decided"]
    # every attempt of a pair at temperature 0.2 with its own seed; attempts of a pair in order
    for pid in ids:
        assert [a for p, a in teacher.seen if p == pid] == list(range(len([1 for p, _ in teacher.seen if p == pid])))
    recorded = json.loads((root / "stats.json").read_text())["teacher.verify"]
    assert recorded["in"] == recorded["out"] + sum(recorded["rejected"].values())
    rejects = [json.loads(line) for line in (root / "rejects.jsonl").read_text().splitlines()]
    assert sorted(r["key"]["pair_id"] for r in rejects if r["stage"] == "teacher.verify") == sorted(disc)
    assert kept[ids[0]]["prompt_tokens"] > 1000 and kept[ids[0]]["cost_usd"] > 0


def test_outage_mid_pair_stays_pending_then_resumes(run, teacher, tmp_path):
    root, pairs = run
    ids = [p["pair_id"] for p in pairs]
    cfg = llm_config(teacher.server, tmp_path / "cache")
    teacher.script = {ids[0]: ["disagree", "outage"], ids[1]: ["outage"]}
    stats = verify(root, VerifyConfig(), cfg, progress=False)
    assert stats.extra["pending"] == 2 and stats.n_in == 4 and stats.n_out == 4
    assert sorted(stats.extra["pending_pair_ids"]) == sorted(ids[:2])
    for name in ("preferences.parquet", "discarded.parquet"):     # pending pairs are written nowhere
        assert not set(ids[:2]) & set(_rows(root / name))
    answered_before = list(teacher.answered)

    teacher.script = {ids[0]: ["disagree", "agree"], ids[1]: ["agree"]}    # the endpoint is back
    stats = verify(root, VerifyConfig(), cfg, progress=False)
    assert stats.extra["pending"] == 0 and stats.n_out == 6
    kept = _rows(root / "preferences.parquet")
    assert kept[ids[0]]["attempts"] == 2 and [v["outcome"] for v in kept[ids[0]]["verdicts"]] == ["disagree", "agree"]
    # the rerun sent only what was missing: attempt 2 of the first pair, attempt 1 of the second
    new = teacher.answered[len(answered_before):]
    assert len(new) == 2 and not set(new) & set(answered_before)
    assert stats.extra["llm"]["cached"] == 4 + 1


def test_same_seed_and_cache_give_identical_files(run, teacher, tmp_path):
    root, pairs = run
    teacher.script = {pairs[0]["pair_id"]: ["disagree", "agree"], pairs[1]["pair_id"]: ["disagree"] * 5}
    cfg = llm_config(teacher.server, tmp_path / "cache")
    verify(root, VerifyConfig(), cfg, progress=False)
    first = {n: (root / n).read_bytes() for n in ("preferences.parquet", "discarded.parquet")}
    sent = len(teacher.answered)
    verify(root, VerifyConfig(), cfg, progress=False)
    assert {n: (root / n).read_bytes() for n in first} == first
    assert len(teacher.answered) == sent           # everything came from the cache


def test_sigkill_mid_run_then_rerun(run, teacher, tmp_path):
    """Kill ``python -m teacher.verify`` while requests are in flight, rerun it: no answered request
    is sent again and the outputs are byte-identical to an uninterrupted run's."""
    root, pairs = run
    ids = [p["pair_id"] for p in pairs]
    teacher.script = {ids[0]: ["disagree", "disagree", "agree"], ids[1]: ["disagree"] * 5,
                      ids[2]: ["unparsed", "agree"]}

    # The reference: an uninterrupted run on a copy, with its own cache.
    ref = tmp_path / "ref"
    ref.mkdir()
    for name in ("trajectories.parquet", "candidates.parquet", "stats.json"):     # with their producers
        (ref / name).write_bytes((root / name).read_bytes())
    verify(ref, VerifyConfig(), llm_config(teacher.server, tmp_path / "ref_cache"), progress=False)
    teacher.answered.clear()

    cache = tmp_path / "cache"
    cmd = [sys.executable, "-m", "teacher.verify", "--run", str(root), "--base-url", teacher.server.base_url,
           "--model", "scripted-teacher", "--cache-dir", str(cache), "--max-retries", "0",
           "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--price-in", "1", "--price-out", "4", "--quiet"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    teacher.hold_after = 8                          # answer 8 requests, then hold the rest unanswered
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240               # the child imports torch: slow on a loaded 2-core machine
    while time.monotonic() < deadline:
        cached = len(list(cache.glob("*/*.json"))) if cache.exists() else 0
        if cached >= 8 and teacher.held >= 1:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    else:
        pytest.fail("the verify process never reached the held requests")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert not (root / "preferences.parquet").exists()     # killed before writing anything
    teacher.release.set()                                   # held requests end unanswered
    answered_first = list(teacher.answered)
    assert len(answered_first) == 8
    teacher.hold_after = None

    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answered_second = teacher.answered[len(answered_first):]
    assert not set(answered_first) & set(answered_second)   # no request answered twice
    assert len(set(teacher.answered)) == len(teacher.answered)
    for name in ("preferences.parquet", "discarded.parquet"):
        assert (root / name).read_bytes() == (ref / name).read_bytes(), name


def test_prompt_template_renders_a_users_exact_text(run, teacher, tmp_path):
    """``--prompt-template``: the teacher sees the user's text, with the fields filled in."""
    root, pairs = run
    template = tmp_path / "t.yaml"
    template.write_text("system: Judge carefully.\n"
                        "user: |\n  GOAL={intent}\n  URL={current_url}\n"
                        "  [The Begin of Response 1]\n  {action1}\n  [The End of Response 1]\n"
                        "  [The Begin of Response 2]\n  THOUGHT:{thought2}\n  ACTION:\n  {response_2}\n"
                        "  [The End of Response 2]\n  Keep {{braces}} and {\"json\": 1} as they are.\n")
    cmd = [sys.executable, "-m", "teacher.verify", "--run", str(root), "--base-url", teacher.server.base_url,
           "--model", "scripted-teacher", "--cache-dir", str(tmp_path / "cache"), "--max-retries", "0",
           "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--quiet", "--prompt-template", str(template)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    kept = _rows(root / "preferences.parquet")
    assert len(kept) == len(pairs)
    row = next(iter(kept.values()))
    system, user = row["messages"][0]["content"], row["messages"][1]["content"]
    assert system == "Judge carefully."
    assert user.startswith(f"GOAL={row['intent']}\nURL={row['url']}\n")
    assert "THOUGHT:\n" in user and "Keep {braces} and {\"json\": 1} as they are." in user
    parts = parse_prompt(row["messages"])
    assert (parts.response_1, parts.response_2) == (row["response_1"], row["response_2"])
    stats = json.loads((root / "stats.json").read_text())["teacher.verify"]
    assert stats["config"]["format"] == "template" and stats["config"]["prompt_template"] == str(template)

    bad = tmp_path / "bad.yaml"
    bad.write_text("user: 'only {response_1} and {nonsense}'\n")
    done = subprocess.run(cmd[:-1] + [str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "response_2" in done.stderr


def test_cli_flags_reach_the_verify_and_teacher_configs(monkeypatch):
    """``--seed/--temperature/--max-tokens`` are VerifyConfig's (the paper's defaults) and also set
    the teacher's LLMConfig; the other LLM flags set the teacher only; switches are --x/--no-x."""
    import teacher.verify as tv

    seen = {}

    def fake_verify(run, config, llm_config, progress, replay_config, replay_backend=None):
        seen.update(config=config, llm=llm_config, progress=progress, replay=replay_config, backend=replay_backend)
        raise FileNotFoundError("stop before any work")

    monkeypatch.setattr(tv, "verify", fake_verify)
    assert tv.main(["--run", "R", "--k", "2", "--max-tokens", "128", "--base-url", "http://h/v1", "--model", "m",
                    "--quiet", "--no-cache", "--verdict-mode", "generate", "--untrusted", "fence"]) == 2
    c, llm = seen["config"], seen["llm"]
    assert (c.k, c.max_tokens, c.temperature, c.seed, c.verdict_mode, c.untrusted) == (2, 128, 0.2, 0, "generate",
                                                                                        "fence")
    assert (llm.base_url, llm.model, llm.max_tokens, llm.no_cache) == ("http://h/v1", "m", 128, True)
    assert seen["progress"] is False
    assert tv.main(["--run", "R"]) == 2 and seen["config"] == VerifyConfig() and seen["progress"] is True
    assert tv.main(["--run", "R", "--verifier", "replay", "--replay-solver-steps", "4"]) == 2
    assert (seen["config"].verifier, seen["replay"].solver_steps) == ("replay", 4)
    assert seen["backend"].name == "miniwob-solver"
    assert tv.main(["--run", "R", "--verifier", "replay", "--replay-continuation", "policy", "--replay-rollouts", "3",
                    "--replay-policy-base-url", "http://p/v1", "--replay-policy-model", "pm"]) == 2
    assert (seen["replay"].continuation, seen["replay"].rollouts) == ("policy", 3)
    assert (seen["backend"].name, seen["backend"].policy.base_url, seen["backend"].policy.model) == (
        "miniwob-policy", "http://p/v1", "pm")
    for bad in (["--untrusted", "bogus"], ["--verdict-mode", "vote"], ["--quiet", "yes"], ["--verifier", "human"]):
        with pytest.raises(SystemExit):
            tv.main(["--run", "R", *bad])
