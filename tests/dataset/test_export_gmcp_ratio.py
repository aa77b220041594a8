"""Controlled-GMCP exports (surfPRM Table 6): ``dataset.export --gmcp-ratio R`` drops rows, never
duplicates them, until the exported rows' GMCP share is R +- 0.02 over all splits together, and
counts and records what it dropped (in = out + rejected)."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataset.export import main
from dataset.gmcp_ratio import TOLERANCE, match_gmcp_ratio, target_counts
from scripted_teacher import ScriptedTeacher, llm_config, make_run, start
from teacher.verify import VerifyConfig, verify


def _best_total(g: int, o: int, ratio: float) -> int:
    """The largest subset size with a share within the tolerance, by brute force."""
    return max((gk + ok for gk in range(g + 1) for ok in range(o + 1)
                if gk + ok and abs(gk / (gk + ok) - ratio) <= TOLERANCE + 1e-9), default=0)


@pytest.mark.parametrize("ratio", [0.0, 0.02, 0.25, 0.5, 0.746, 0.9, 1.0])
def test_target_counts_keep_the_largest_subset_within_the_tolerance(ratio):
    for g in range(0, 13):
        for o in range(0, 13):
            best = _best_total(g, o, ratio)
            if best == 0:
                with pytest.raises(ValueError, match="gmcp-ratio"):
                    target_counts(g, o, ratio)
                continue
            kg, ko = target_counts(g, o, ratio)
            assert 0 <= kg <= g and 0 <= ko <= o and kg + ko == best
            assert abs(kg / (kg + ko) - ratio) <= TOLERANCE + 1e-9


def test_match_drops_rows_seeded_and_never_duplicates():
    rows = [{"pair_id": f"p{i}", "gmcp": i % 4 != 0} for i in range(200)]         # 75% GMCP
    kept, dropped = match_gmcp_ratio(rows, 0.5, seed=1)
    assert abs(sum(r["gmcp"] for r in kept) / len(kept) - 0.5) <= TOLERANCE
    assert len({r["pair_id"] for r in kept}) == len(kept) and len(kept) + len(dropped) == len(rows)
    assert all(r["gmcp"] for r in dropped) and len(kept) == 104      # only the excess class goes: 54 of 104 = 0.519
    assert kept == [r for r in rows if r in kept]                                  # input order kept
    again, _ = match_gmcp_ratio(rows, 0.5, seed=1)
    other, _ = match_gmcp_ratio(rows, 0.5, seed=2)
    assert again == kept and other != kept


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """A run verified by the scripted teacher whose candidates are two thirds GMCP."""
    from data.rundir import RunDir, StageStats
    from data.schema import CANDIDATE_SCHEMA

    root = tmp_path_factory.mktemp("gmcp_run")
    make_run(root, n_pairs=12)
    cands = pq.read_table(root / "candidates.parquet").to_pylist()
    for i, c in enumerate(cands):
        c["gmcp"] = i % 3 != 0
    run = RunDir(root)
    run.check_inputs("proposals.mine", run.trajectories)
    pq.write_table(pa.Table.from_pylist(cands, schema=CANDIDATE_SCHEMA), root / "candidates.parquet")
    run.write_stage(StageStats("proposals.mine", n_in=len(cands), n_out=len(cands)), [])
    server = start(ScriptedTeacher([c for c in cands if c["sampled"]]))
    try:
        verify(root, VerifyConfig(axtree_chars=800), llm_config(server, root / ".llm_cache"), progress=False)
    finally:
        server.shutdown()
    return root


def _gmcp_of(root) -> dict[str, bool]:
    return {r["pair_id"]: r["gmcp"] for r in pq.read_table(root / "preferences.parquet").to_pylist()}


@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 1.0])
def test_trl_export_at_a_gmcp_ratio(mixed_run, ratio, capsys):
    root = mixed_run
    gmcp = _gmcp_of(root)
    assert 0 < sum(gmcp.values()) < len(gmcp)
    assert main(["--run", str(root), "--format", "trl", "--no-card", "--gmcp-ratio", str(ratio)]) == 0
    rows = [r for s in ("train", "test") for r in pq.read_table(root / f"export/trl/{s}.parquet").to_pylist()]
    ids = [r["pair_id"] for r in rows]
    assert len(ids) == len(set(ids)) and set(ids) <= set(gmcp)                     # no row twice
    assert abs(sum(gmcp[i] for i in ids) / len(ids) - ratio) <= TOLERANCE
    stats = json.loads((root / "stats.json").read_text())["data.export.trl"]
    assert stats["in"] == len(gmcp) == stats["out"] + sum(stats["rejected"].values())
    assert stats["out"] == len(ids) and stats["rejected"].get("gmcp_ratio", 0) == len(gmcp) - len(ids)
    assert stats["gmcp_ratio"]["target"] == ratio and stats["gmcp_ratio"]["share_after"] == pytest.approx(
        sum(gmcp[i] for i in ids) / len(ids))
    rejects = [json.loads(l) for l in (root / "rejects.jsonl").read_text().splitlines()]
    dropped = [r["key"]["pair_id"] for r in rejects if r["stage"] == "data.export.trl"]
    assert Counter(r["reason"] for r in rejects if r["stage"] == "data.export.trl") == \
        Counter({"gmcp_ratio": len(dropped)} if dropped else {})
    assert set(dropped) | set(ids) == set(gmcp) and not set(dropped) & set(ids)


def test_the_task_split_does_not_move_and_webprmbench_and_labels_follow(mixed_run):
    root = mixed_run
    assert main(["--run", str(root), "--format", "trl", "--no-card"]) == 0
    test_tasks = {r["task_id"] for r in pq.read_table(root / "export/trl/test.parquet").to_pylist()}
    assert main(["--run", str(root), "--format", "trl", "--format", "webprmbench", "--format", "trl-labels",
                 "--no-card", "--split", "all", "--gmcp-ratio", "1"]) == 0
    assert {r["task_id"] for r in pq.read_table(root / "export/trl/test.parquet").to_pylist()} <= test_tasks
    gmcp = _gmcp_of(root)
    bench = pq.read_table(root / "export/webprmbench.parquet").to_pylist()
    assert bench and all(gmcp[r["pair_id"]] for r in bench)
    labels = [r for s in ("train", "test") for r in pq.read_table(root / f"export/trl-labels/{s}.parquet").to_pylist()]
    assert labels and all(r["gmcp"] for r in labels)
    stats = json.loads((root / "stats.json").read_text())
    for stage in ("data.export.webprmbench", "data.export.trl_labels"):
        s = stats[stage]
        assert s["in"] == s["out"] + sum(s["rejected"].values()) and s["rejected"]["gmcp_ratio"] > 0


def test_a_ratio_outside_0_1_is_refused_before_anything_is_written(mixed_run, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--run", str(mixed_run), "--format", "trl", "--gmcp-ratio", "1.5"])
    assert e.value.code == 2 and "--gmcp-ratio: must be <= 1" in capsys.readouterr().err
