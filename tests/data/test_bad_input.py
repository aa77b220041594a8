"""Each kind of bad input becomes a counted reject with a reason; the run goes on."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT, write_step_pickle
from data.ingest import ingest

GOOD_AXTREE = ("RootWebArea 'Shop', focused, url='https://shop.example.com/'\n"
               "\t[12] link 'Home', url='https://shop.example.com/'\n\t[13] button 'Buy'")


def _state(action="Clicking buy.\n```click('13')```", axtree=GOOD_AXTREE, error=""):
    return {"step": 0, "action": action, "agent_info": {},
            "obs": {"chat_messages": [{"role": "user", "message": "Buy the thing"}],
                    "goal_object": None, "last_action": "", "last_action_error": error,
                    "open_pages_urls": ("https://shop.example.com/",), "active_page_index": [0],
                    "axtree_txt": axtree, "pruned_html": "<html bid='1'></html>"}}


def _experiment(root: Path, name="2025-01-01_00-00-00_Agent_on_shop.buy_3", n=3) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "summary_info.json").write_text(json.dumps({"cum_reward": 1, "n_steps": n}))
    for i in range(n):
        write_step_pickle(d / f"step_{i}.pkl.gz", _state(action=None if i == n - 1 else "```click('13')```"))
    return d


def _stats(run):
    return json.loads((run / "stats.json").read_text())["ingest"]


def _rejects(run):
    return [json.loads(l) for l in (run / "rejects.jsonl").read_text().splitlines()]


def test_good_synthetic_experiment(tmp_path):
    exp = _experiment(tmp_path / "in")
    stats = ingest("agentlab", [exp], tmp_path / "run")
    assert (stats.n_in, stats.n_out) == (3, 3)
    rows = pq.read_table(tmp_path / "run" / "trajectories.parquet").to_pylist()
    assert rows[0]["intent"] == "Buy the thing"          # goal from the user's chat message
    assert rows[0]["site"] == "shop.example.com" and rows[0]["success"] is True


@pytest.mark.parametrize("kind,reason", [
    ("corrupt_gzip", "corrupt_gzip"),
    ("unexpected_class", "unexpected_class"),
    ("missing_field", "missing_field"),
    ("unparseable_action", "unparseable_action"),
    ("empty_axtree", "empty_observation"),
    ("truncated_pickle", "corrupt_pickle"),
])
def test_bad_step_is_rejected_with_reason(tmp_path, kind, reason):
    exp = _experiment(tmp_path / "in")
    bad = exp / "step_1.pkl.gz"
    if kind == "corrupt_gzip":
        bad.write_bytes(bad.read_bytes()[:40])
    elif kind == "unexpected_class":
        # A pickle that would call os.system if loaded naively.
        marker = tmp_path / "pwned"
        payload = (b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
        with gzip.open(bad, "wb") as f:
            f.write(payload)
    elif kind == "missing_field":
        state = _state()
        del state["obs"]["axtree_txt"]
        write_step_pickle(bad, state)
    elif kind == "unparseable_action":
        write_step_pickle(bad, _state(action="I will click it.\n```click(the_button)```"))
    elif kind == "empty_axtree":
        write_step_pickle(bad, _state(axtree="  \n"))
    elif kind == "truncated_pickle":
        with gzip.open(bad, "wb") as f:
            f.write(b"\x80\x04\x95")
    run = tmp_path / "run"
    stats = ingest("agentlab", [exp], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (3, 2, {reason: 1})
    s = _stats(run)
    assert s["in"] == s["out"] + sum(s["rejected"].values())
    rej = _rejects(run)
    assert rej[0]["reason"] == reason and rej[0]["source"] == str(bad) and rej[0]["key"]["step_idx"] == 1
    if kind == "unexpected_class":
        assert not (tmp_path / "pwned").exists()
        assert "os.system" in rej[0]["detail"] or "posix.system" in rej[0]["detail"]


def test_webprm_bad_rows(tmp_path, shared_data):
    src = tmp_path / "in"
    src.mkdir()
    good = json.loads((shared_data / "webprm_collection_samples" / "4.json").read_text())
    lines = [json.dumps(good), "{not json", json.dumps({**good, "step_id": "11", "text_observation": ""}),
             json.dumps({**good, "step_id": "12", "chosen": {"thought": "x", "action": "click(oops)"}}),
             json.dumps({**good, "step_id": "13", "chosen": [{"thought": "t", "action": "click('3365')"}]}),
             json.dumps({k: v for k, v in good.items() if k != "intent"}),
             json.dumps(good)]
    (src / "rows.jsonl").write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    stats = ingest("webprm", [src], run)
    assert stats.n_in == 7 and stats.n_out == 2
    assert dict(stats.rejected) == {"corrupt_file": 1, "empty_observation": 1, "unparseable_action": 1,
                                    "missing_field": 1, "duplicate_step": 1}
    rows = pq.read_table(run / "trajectories.parquet").to_pylist()
    assert [r["step_idx"] for r in rows] == [10, 13]
    assert rows[1]["action"] == "click('3365')"         # chosen given as a list


def _cli(args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "data.ingest", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_cli_exit_codes_and_no_traceback(tmp_path):
    exp = _experiment(tmp_path / "in")
    ok = _cli(["--source", "agentlab", "--input", str(exp), "--out", str(tmp_path / "ok")])
    assert ok.returncode == 0 and "in=3 out=3" in ok.stdout
    for p in exp.glob("step_*.pkl.gz"):
        p.write_bytes(b"garbage")
    bad = _cli(["--source", "agentlab", "--input", str(exp), "--out", str(tmp_path / "bad")])
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "nothing could be ingested" in bad.stderr
    assert _stats(tmp_path / "bad")["rejected"] == {"corrupt_gzip": 3}
    missing = _cli(["--source", "agentlab", "--input", str(tmp_path / "nope"), "--out", str(tmp_path / "x")])
    assert missing.returncode == 2 and "input not found" in missing.stderr and "Traceback" not in missing.stderr


def test_rerun_replaces_own_rejects(tmp_path):
    exp = _experiment(tmp_path / "in")
    (exp / "step_1.pkl.gz").write_bytes(b"garbage")
    run = tmp_path / "run"
    ingest("agentlab", [exp], run)
    ingest("agentlab", [exp], run)
    assert len(_rejects(run)) == 1


def test_overlapping_inputs_do_not_double_steps(tmp_path):
    exp = _experiment(tmp_path / "in")
    stats = ingest("agentlab", [exp, tmp_path / "in"], tmp_path / "run")
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (6, 3, {"duplicate_step": 3})


@pytest.mark.parametrize("change,reason", [
    ({"text_observation": 5}, "bad_field_type"),
    ({"chosen": {"thought": ["a"], "action": "click('3365')"}}, None),    # odd thought: dropped, row kept
    ({"step_id": str(2**40)}, "bad_step_index"),
    ({"intent": "   "}, "missing_goal"),
    ({"current_url": "http://[::1/x"}, None),                                # unreadable URL: site 'invalid.url'
])
def test_odd_webprm_values_never_crash(tmp_path, shared_data, change, reason):
    good = json.loads((shared_data / "webprm_collection_samples" / "4.json").read_text())
    src = tmp_path / "in"
    src.mkdir()
    (src / "rows.jsonl").write_text(json.dumps({**good, "step_id": "1"}) + "\n" + json.dumps({**good, **change}) + "\n")
    stats = ingest("webprm", [src], tmp_path / "run")
    assert stats.n_in == 2
    assert dict(stats.rejected) == ({reason: 1} if reason else {})
    assert pq.read_table(tmp_path / "run" / "trajectories.parquet").num_rows == stats.n_out


def test_deeply_nested_json_is_a_reject(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (src / "ok.json").write_text(json.dumps({"task_id": "1", "step_id": "0", "intent": "x", "current_url": "http://a.b/",
                                             "text_observation": "[1] button 'A'",
                                             "chosen": {"thought": "t", "action": "click('1')"}}))
    stats = ingest("webprm", [src], tmp_path / "run")
    assert stats.n_out == 1 and stats.rejected["corrupt_file"] == 1


def test_agentlab_odd_types_are_rejects(tmp_path):
    exp = _experiment(tmp_path / "in")
    state = _state()
    state["obs"]["axtree_txt"] = 5
    write_step_pickle(exp / "step_1.pkl.gz", state)
    state = _state()
    state["obs"]["pruned_html"] = 7
    write_step_pickle(exp / "step_0.pkl.gz", state)
    stats = ingest("agentlab", [exp], tmp_path / "run")
    assert (stats.n_out, dict(stats.rejected)) == (2, {"missing_field": 1})
    rows = pq.read_table(tmp_path / "run" / "trajectories.parquet").to_pylist()
    assert rows[0]["html"] is None


def test_a_stage_rewrites_its_rejects_in_pipeline_order_streamed(tmp_path):
    """``write_stage`` replaces the stage's own lines, keeps every other stage's (non-ASCII text
    from another writer included) in pipeline order, a stage's lines in the order written, and
    drops a torn line; the new rejects may be any iterable (mining hands a generator)."""
    from data.rundir import Reject, RunDir, StageStats

    run = RunDir(tmp_path)
    lines = [{"stage": "teacher.verify", "reason": "t", "source": "s"},
             {"stage": "proposals.mine", "reason": "old", "source": "s"},
             {"stage": "ingest", "reason": "i1", "source": "café"},
             {"stage": "ingest", "reason": "i2", "source": "s"}]
    (tmp_path / "rejects.jsonl").write_text(
        "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines) + '{"stage": "ingest", "rea\n',
        encoding="utf-8")
    new = (Reject("proposals.mine", f"new{i}", "s") for i in range(2))
    run.write_stage(StageStats("proposals.mine", n_in=2, n_out=0, rejected={"new0": 1, "new1": 1}), new)
    got = [json.loads(x) for x in (tmp_path / "rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(g["stage"], g["reason"]) for g in got] == [
        ("ingest", "i1"), ("ingest", "i2"), ("proposals.mine", "new0"), ("proposals.mine", "new1"),
        ("teacher.verify", "t")]
    assert got[0]["source"] == "café"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
