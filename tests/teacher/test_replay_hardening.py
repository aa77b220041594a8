"""What a trajectory cannot make the replay verifier do (issue 40 items 4, 5, 8): run Python, fetch
a URL, wait an hour; and the inputs that used to fail with a traceback after work was done (a seed
MiniWoB cannot take, task pages that are missing or not served, a cache folder that cannot be
written), each one line now, before any replay."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.env import CHROMIUM
from teacher.replay import ReplayConfig, Target, cache_for, replay_step

SEED = 3        # click-button seed 3 (tests/teacher/test_replay.py)
AXTREE = "RootWebArea 'Click Button Task', focused\n\t[15] textbox ''\n\t[17] button 'cancel'\n\t[19] button 'submit'"


def _run(root: Path, seed: int) -> None:
    """A click-button run of one step and one sampled pair (a synthetic O_t: nothing is replayed)."""
    from data.ingest import ingest
    from data.rundir import RunDir, StageStats
    from data.schema import AXIS_OF, CANDIDATE_SCHEMA, RULES, STORAGE_ORDER, TRAJECTORY_SCHEMA

    base = {"source": "search", "site": "miniwob", "task_id": f"click-button.{seed}", "traj_id": "r/cb",
            "intent": "Click on the submit button.", "url": "file:///x/miniwob/click-button.html",
            "obs_format": "indented", "html": None, "action_error": None, "thought": None, "success": True,
            "source_path": "tasks/cb.jsonl", "meta": json.dumps({"task": "click-button", "seed": seed})}
    rows = [{**base, "step_idx": 0, "observation": AXTREE, "action": "click('19')"},
            {**base, "step_idx": 1, "observation": AXTREE, "action": None}]
    src = root.parent / f"{root.name}.src.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=TRAJECTORY_SCHEMA).sort_by(STORAGE_ORDER), src)
    ingest("canonical", [src], root, quiet=True)
    cand = {"pair_id": "0" * 16, "site": "miniwob", "traj_id": "r/cb", "task_id": base["task_id"], "step_idx": 0,
            "rule": RULES[0], "axis": AXIS_OF[RULES[0]], "action_pos": "click('19')", "action_neg": "click('17')",
            "gmcp": False, "sampled": True, "pos_kind": "element", "pos_bid": "19", "pos_node": "p", "neg_bid": "17",
            "neg_node": "n", "op_pos": "click", "op_neg": "click", "value_source": None, "evidence": "{}",
            "mode": "graph"}
    run = RunDir(root)
    run.check_inputs("proposals.mine", run.trajectories)
    pq.write_table(pa.Table.from_pylist([cand], schema=CANDIDATE_SCHEMA), root / "candidates.parquet")
    run.write_stage(StageStats("proposals.mine", n_in=1, n_out=1), [])


def _verify(root: Path, *flags: str) -> tuple[int, str]:
    import contextlib
    import io

    from teacher.verify import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["--run", str(root), "--quiet", "--verifier", "replay", "--replay-workers", "1",
                     "--replay-no-cache", *flags])
    return code, err.getvalue()


@pytest.mark.parametrize("seed", [-1, 2**40])
def test_a_seed_miniwob_cannot_take_is_one_line(tmp_path, seed):
    _run(tmp_path / "run", seed)
    code, err = _verify(tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and "meta.seed out of range" in err and str(seed) in err
    assert not (tmp_path / "run" / "preferences.parquet").exists()


@pytest.mark.parametrize("url, says", [
    ("http://127.0.0.1:9/miniwob/", "could not be fetched"),        # the discard port: nothing listens
    ("file:///nonexistent/miniwob/", "no page for ['click-button']"),
])
def test_task_pages_that_are_not_there_are_one_line(tmp_path, monkeypatch, url, says):
    _run(tmp_path / "run", SEED)
    monkeypatch.setenv("MINIWOB_URL", url)
    code, err = _verify(tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and says in err and "MINIWOB_URL" in err


def test_an_unwritable_cache_folder_warns_and_replays_without_it(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert cache_for(ReplayConfig(cache_dir=str(tmp_path / "file" / "cache"))) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: --replay-cache-dir") and "without a cache" in err


def test_a_cache_that_stops_taking_writes_is_dropped(tmp_path, capsys):
    from teacher.replay import Replay, ReplayVerifier

    class Full:
        def put(self, *args):
            raise OSError(28, "No space left on device")

    verifier = ReplayVerifier(type("B", (), {"name": "b"})(), ReplayConfig(), Full())
    target = Target("click-button", 0, (), AXTREE, "click('19')", "click('17')")
    verifier.store(target, Replay("harmful", {}))
    verifier.store(target, Replay("harmful", {}))
    assert verifier.cache is None and capsys.readouterr().err.count("warning:") == 1


def test_an_outcome_that_timed_out_is_not_cached():
    """A timeout left after the retries reflects the machine's load: the next run replays the pair."""
    from teacher.replay import Replay, ReplayVerifier

    class Store:
        def __init__(self):
            self.keys = []

        def put(self, key, *args):
            self.keys.append(key)

    store = Store()
    verifier = ReplayVerifier(type("B", (), {"name": "b"})(), ReplayConfig(), store)
    first, second = (Target("click-button", s, (), AXTREE, "click('19')", "click('17')") for s in (0, 1))
    verifier.store(first, Replay("replay_mismatch", {"error": "TimeoutError: Locator.click: Timeout 500ms exceeded"}))
    verifier.store(second, Replay("harmful", {"reward_pos": 1.0}))
    assert store.keys == [verifier.key(second)]


# -- in the browser: planted actions run nothing ------------------------------------------------------
class _Counter(BaseHTTPRequestHandler):
    hits = []

    def do_GET(self):
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")
def test_planted_actions_run_nothing(tmp_path):
    from teacher.replay import MiniWoBBackend

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/x"
    marker = tmp_path / "X"
    python = f"click('19'); __import__('os').system('touch {marker}')"
    backend = MiniWoBBackend()
    env = backend.open("click-button")
    try:
        obs = env.reset(seed=SEED)
        assert "[19] button 'submit'" in obs.axtree and "[17] button 'cancel'" in obs.axtree
        submit, cancel = "click('19')", "click('17')"
        config = ReplayConfig(solver_steps=3)

        def one(history=(), pos=submit, neg=cancel):
            return replay_step(env, backend, [Target("click-button", SEED, tuple(history), obs.axtree, pos, neg)],
                               config)[0]
        for history in ([python], [f"goto('{url}')"], [f"noop(0) goto('{url}') # click('17')"], ["noop(3600000)"]):
            r = one(history=history)
            assert (r.outcome, r.evidence["mismatch"]) == ("replay_mismatch", "history_action_refused"), history
            assert r.evidence["error"].startswith("refused")
        r = one(pos=f"goto('{url}')")
        assert (r.outcome, r.evidence["mismatch"]) == ("replay_mismatch", "positive_failed")
        for neg in (python, f"goto('{url}')", f"noop(0) goto('{url}') # click('17')"):
            r = one(neg=neg)
            assert r.outcome == "not_executable" and r.evidence["neg"]["error"].startswith("refused"), neg
            assert r.evidence["pos"]["reward"] == 1.0       # a+ did run: the refusal is a-'s alone
        assert one().outcome == "harmful"
    finally:
        env.close()
        server.shutdown()
        server.server_close()
    assert not marker.exists() and _Counter.hits == []
