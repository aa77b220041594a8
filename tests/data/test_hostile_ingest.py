"""Hostile inputs to ``data.ingest`` (issue 18): every bad record is one counted reject with a
reason, the good records around it survive, ``in = out + rejected`` holds, and the CLI prints
no traceback. Each fixture is generated here, small."""

import gzip
import json
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import write_step_pickle
from data.actions import ActionParseError, parse_action
from data.ingest import ingest
from data.readers.safe_pickle import TooLargeError, read_gz_capped
from data.schema import TRAJECTORY_SCHEMA
from hostile_util import (
    BIG_HEX,
    EXP,
    HUGE_FRAME,
    balanced,
    cli,
    experiment,
    gz,
    no_traceback,
    rejects,
    state,
    webprm_row,
    zero_bomb,
)


def _rows(run):
    return pq.read_table(run / "trajectories.parquet").to_pylist()


# -- AgentLab pickles -----------------------------------------------------------------------------
def test_huge_frame_step_pickle_is_one_reject(tmp_path):
    exp = experiment(tmp_path / "in")
    assert len(HUGE_FRAME) == 13
    gz(exp / "step_1.pkl.gz", HUGE_FRAME)
    run = tmp_path / "run"
    stats = ingest("agentlab", [exp], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (3, 2, {"corrupt_pickle": 1})
    balanced(run)
    (rej,) = rejects(run)
    assert rej["key"] == {"traj_id": EXP, "step_idx": 1} and "OverflowError" in rej["detail"]
    assert [r["step_idx"] for r in _rows(run)] == [0, 2]


@pytest.mark.parametrize("payload,reason,detail", [
    (HUGE_FRAME, "corrupt_pickle", "OverflowError"),
    (b"cos\nsystem\n(S'echo pwned'\ntR.", "unexpected_class", "refused to load class"),
])
def test_bad_goal_pickle_is_a_reject_and_the_steps_survive(tmp_path, payload, reason, detail):
    exp = experiment(tmp_path / "in")
    gz(exp / "goal_object.pkl.gz", payload)
    run = tmp_path / "run"
    stats = ingest("agentlab", [exp], run)
    # The goal file is one record in and one rejected; its steps fall back to the chat goal.
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (4, 3, {reason: 1})
    balanced(run)
    (rej,) = rejects(run)
    assert rej["source"] == str(exp / "goal_object.pkl.gz") and rej["key"] == {"traj_id": EXP,
                                                                               "file": "goal_object.pkl.gz"}
    assert rej["detail"].startswith("goal object: ") and detail in rej["detail"]
    assert {r["intent"] for r in _rows(run)} == {"Buy the thing"}


def test_huge_action_literal_is_unparseable_not_fatal(tmp_path):
    exp = experiment(tmp_path / "in")
    write_step_pickle(exp / "step_1.pkl.gz", state(action=f"Scrolling.\n```scroll({BIG_HEX}, 0)```"))
    run = tmp_path / "run"
    stats = ingest("agentlab", [exp], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (3, 2, {"unparseable_action": 1})
    balanced(run)
    assert "out of range" in rejects(run)[0]["detail"]


@pytest.mark.parametrize("text", [f"scroll({BIG_HEX}, 0)", "scroll(" + "9" * 5000 + ", 0)", "scroll(1e999, 0)",
                                  "scroll(0, -1e999)", "noop(1j)", "click('1')\x00", 5, b"click('1')"])
def test_parse_action_refuses_numbers_and_types_it_cannot_write_back(text):
    with pytest.raises(ActionParseError):
        parse_action(text)


def test_decompression_bomb_is_rejected_under_the_cap(tmp_path):
    exp = experiment(tmp_path / "in")
    zero_bomb(exp / "step_1.pkl.gz", 3)            # ~3 KB on disk, 3 MB decompressed
    run = tmp_path / "run"
    stats = ingest("agentlab", [exp], run, max_decompressed_mb=1)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (3, 2, {"too_large": 1})
    s = balanced(run)
    assert s["max_decompressed_mb"] == 1
    assert "more than 1 MB" in rejects(run)[0]["detail"]
    # Under the default cap the same file is read (and is simply not a pickle).
    assert dict(ingest("agentlab", [exp], tmp_path / "run2").rejected) == {"corrupt_pickle": 1}


def test_capped_read_streams_never_the_whole_file(tmp_path):
    bomb = zero_bomb(tmp_path / "bomb.gz", 64)      # 64 MB decompressed
    tracemalloc.start()
    try:
        with pytest.raises(TooLargeError):
            read_gz_capped(bomb, 1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MB for a 1 MB cap"
    assert read_gz_capped(gz(tmp_path / "ok.gz", b"x" * 1000), 1000) == b"x" * 1000


def test_cli_max_decompressed_mb_flag(tmp_path):
    exp = experiment(tmp_path / "in")
    zero_bomb(exp / "step_0.pkl.gz", 2)
    proc = cli("data.ingest", "--source", "agentlab", "--input", str(exp), "--out", str(tmp_path / "run"),
               "--max-decompressed-mb", "0.5")
    no_traceback(proc)
    assert proc.returncode == 0 and "too_large=1" in proc.stdout
    bad = cli("data.ingest", "--source", "agentlab", "--input", str(exp), "--out", str(tmp_path / "run"),
              "--max-decompressed-mb", "0")
    assert bad.returncode == 2 and "must be positive" in bad.stderr
    no_traceback(bad)


# -- WebPRM rows ----------------------------------------------------------------------------------
def test_webprm_infinite_step_id_is_one_reject(tmp_path):
    lines = [json.dumps(webprm_row(0)), json.dumps(webprm_row(float("inf"))), json.dumps(webprm_row(1))]
    assert "Infinity" in lines[1]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    stats = ingest("webprm", [tmp_path / "rows.jsonl"], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (3, 2, {"bad_step_index": 1})
    balanced(run)
    assert [r["step_idx"] for r in _rows(run)] == [0, 1]


def test_non_utf8_byte_costs_only_its_line(tmp_path):
    good0, good2 = json.dumps(webprm_row(0)).encode(), json.dumps(webprm_row(2)).encode()
    bad = json.dumps(webprm_row(1, intent="Buy the caf\u00e9"), ensure_ascii=False).encode()
    bad = bad.replace(b"\xc3\xa9", b"\xe9")
    assert b"\xe9" in bad
    # A U+2028 inside a JSON string is no line break either.
    sep = json.dumps(webprm_row(3, intent="two\u2028lines"), ensure_ascii=False).encode()
    (tmp_path / "rows.jsonl").write_bytes(b"\n".join([good0, bad, good2, sep]) + b"\n")
    run = tmp_path / "run"
    stats = ingest("webprm", [tmp_path / "rows.jsonl"], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (4, 3, {"bad_encoding": 1})
    balanced(run)
    assert rejects(run)[0]["source"].endswith("rows.jsonl#1")
    assert [r["step_idx"] for r in _rows(run)] == [0, 2, 3]


def test_lone_surrogate_is_a_reject_not_a_failed_write(tmp_path):
    lines = [json.dumps(webprm_row(0)), json.dumps(webprm_row(1, intent="bad \ud800 text")), json.dumps(webprm_row(2))]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    stats = ingest("webprm", [tmp_path / "rows.jsonl"], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (3, 2, {"bad_encoding": 1})
    balanced(run)


def test_webprm_huge_action_literal(tmp_path):
    rows = [webprm_row(0), webprm_row(1, chosen={"thought": "", "action": f"scroll({BIG_HEX}, 0)"})]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    run = tmp_path / "run"
    stats = ingest("webprm", [tmp_path / "rows.json"], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (2, 1, {"unparseable_action": 1})
    balanced(run)


# -- canonical Parquet ----------------------------------------------------------------------------
def _canonical_row(step_idx, **change):
    row = {"source": "agentlab", "site": "shop.example.com", "task_id": "t", "traj_id": "traj", "step_idx": step_idx,
           "intent": "Buy the thing", "url": "https://shop.example.com/",
           "observation": "RootWebArea 'Shop'\n\t[13] button 'Buy'",
           "obs_format": "indented", "html": None, "action": "click('13')", "action_error": None, "thought": None,
           "success": True, "source_path": "x", "meta": "{}"}
    row.update(change)
    return row


def test_canonical_action_column_of_ints(tmp_path):
    good = tmp_path / "in" / "a_good.parquet"
    good.parent.mkdir()
    pq.write_table(pa.Table.from_pylist([_canonical_row(0), _canonical_row(1, action=None)],
                                        schema=TRAJECTORY_SCHEMA), good)
    ints = pa.Table.from_pylist([_canonical_row(0, traj_id="other", action=5),
                                 _canonical_row(1, traj_id="other", action=None)])
    assert ints.schema.field("action").type == pa.int64()
    pq.write_table(ints, tmp_path / "in" / "b_ints.parquet")
    run = tmp_path / "run"
    stats = ingest("canonical", [tmp_path / "in"], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (4, 3, {"bad_field_type": 1})
    balanced(run)
    assert "action is int" in rejects(run)[0]["detail"]
    assert sorted((r["traj_id"], r["step_idx"]) for r in _rows(run)) == [("other", 1), ("traj", 0), ("traj", 1)]


def test_canonical_odd_columns_and_huge_literal(tmp_path):
    rows = [_canonical_row(0), _canonical_row(1, action=f"scroll({BIG_HEX}, 0)"), _canonical_row(2, action=None)]
    t = pa.Table.from_pylist(rows, schema=TRAJECTORY_SCHEMA)
    # a binary column beside the schema's, and a key that is bytes: rejects must stay writable
    t = t.append_column("extra", pa.array([b"\xff", b"\x00", b""]))
    pq.write_table(t, tmp_path / "t.parquet")
    run = tmp_path / "run"
    stats = ingest("canonical", [tmp_path / "t.parquet"], run)
    assert (stats.n_in, stats.n_out, dict(stats.rejected)) == (3, 2, {"unparseable_action": 1})
    balanced(run)


# -- the CLI: every probe at once, no traceback ---------------------------------------------------
def test_cli_all_agentlab_probes_no_traceback(tmp_path):
    exp = experiment(tmp_path / "in", n=6)
    gz(exp / "step_1.pkl.gz", HUGE_FRAME)
    write_step_pickle(exp / "step_2.pkl.gz", state(action=f"```scroll({BIG_HEX}, 0)```"))
    zero_bomb(exp / "step_3.pkl.gz", 2)
    gz(exp / "goal_object.pkl.gz", b"cposix\nsystem\n(S'echo pwned'\ntR.")
    proc = cli("data.ingest", "--source", "agentlab", "--input", str(exp), "--out", str(tmp_path / "run"),
               "--max-decompressed-mb", "1")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    s = balanced(tmp_path / "run")
    assert s["rejected"] == {"corrupt_pickle": 1, "too_large": 1, "unexpected_class": 1, "unparseable_action": 1}
    assert s["out"] == 3


def test_cli_webprm_and_canonical_probes_no_traceback(tmp_path):
    lines = [json.dumps(webprm_row(0)).encode(), json.dumps(webprm_row(float("inf"))).encode(),
             json.dumps(webprm_row(1, intent="caf\u00e9"), ensure_ascii=False).encode().replace(b"\xc3\xa9", b"\xe9"),
             json.dumps(webprm_row(2, chosen={"thought": "", "action": f"scroll({BIG_HEX}, 0)"})).encode(),
             json.dumps(webprm_row(3)).encode()]
    (tmp_path / "rows.jsonl").write_bytes(b"\n".join(lines))
    proc = cli("data.ingest", "--source", "webprm", "--input", str(tmp_path / "rows.jsonl"),
               "--out", str(tmp_path / "w"))
    no_traceback(proc)
    assert proc.returncode == 0 and balanced(tmp_path / "w")["rejected"] == {
        "bad_encoding": 1, "bad_step_index": 1, "unparseable_action": 1}
    pq.write_table(pa.Table.from_pylist([_canonical_row(0, action=7)]), tmp_path / "ints.parquet")
    proc = cli("data.ingest", "--source", "canonical", "--input", str(tmp_path / "ints.parquet"),
               "--out", str(tmp_path / "c"))
    no_traceback(proc)
    assert proc.returncode == 1 and "nothing could be ingested" in proc.stderr
    assert balanced(tmp_path / "c")["rejected"] == {"bad_field_type": 1}


def test_gzip_of_garbage_goal_is_counted(tmp_path):
    exp = experiment(tmp_path / "in")
    (exp / "goal_object.pkl.gz").write_bytes(gzip.compress(b"\x80\x05not a pickle")[:-3])
    stats = ingest("agentlab", [exp], tmp_path / "run")
    assert stats.n_out == 3 and sum(stats.rejected.values()) == 1
    balanced(tmp_path / "run")

