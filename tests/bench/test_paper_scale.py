"""bench/paper_scale.py at a tiny scale: every stage runs as its CLI, the summary lists them in
order with counts that balance, and the scripted teacher's calls are the ones the run decided."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

SHARED = ROOT.parent / "shared" / "data" / "agentlab_workarena"
STAGES = ["ingest", "graph.build", "proposals.mine (fills)", "proposals.mine (cached fills)", "teacher.verify",
          "dataset.export", "datasets.load_dataset"]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared traces not found at {SHARED}")
def test_the_bench_runs_the_whole_job_on_a_tiny_pool(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "bench/paper_scale.py", "--scale", "0.01", "--sites", "3",
                           "--sample-size", "30", "--latency", "0.01", "--workers", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr      # 1: a speed goal missed, as expected here
    s = json.loads((out / "summary.json").read_text())
    assert [r["name"] for r in s["stages"]] == STAGES
    assert s["pool"]["trajectories"] == 9 and s["pool"]["sites"] == 3
    by = {r["name"]: r for r in s["stages"]}
    assert by["ingest"]["in"] == by["graph.build"]["in"] == s["pool"]["observations"]
    for r in s["stages"]:
        assert r["rc"] == 0 and r["seconds"] > 0 and r["peak_rss_mb"] > 0 and r["cpu"] > 0, r
        assert r["job_rss_mb"] >= r["summed_rss_mb"] >= r["peak_rss_mb"] and r["processes"] >= 1, r
        if "in" in r:
            assert r["balanced"] and r["in"] == r["out"] + r["rejected"], r["name"]
    teacher = by["teacher.verify"]["entries"]["teacher.verify"]
    assert teacher["sampled"] == 30 and teacher["pending"] == 0 and by["teacher.verify"]["in"] == 30
    calls = by["teacher.verify"]["endpoint"]
    assert calls["judgment_calls"] == teacher["calls_decided"] >= 30 and calls["fill_calls"] == 0
    assert s["unknown_judgments"] == 0
    assert by["proposals.mine (cached fills)"].get("endpoint") is None, "the rerun's fills came from the cache"
    assert by["datasets.load_dataset"]["loaded"]["preferences"]["train"] == by["teacher.verify"]["out"]
    assert not (out / "run").exists(), "without --keep the run directory is removed"


def test_compare_runs_reads_every_file_and_the_stage_counts(tmp_path):
    from bench.paper_scale import compare_runs

    a, b = tmp_path / "a", tmp_path / "b"
    for root, seconds, card in ((a, 1.0, "x"), (b, 9.0, "y")):
        (root / "graphs" / "s").mkdir(parents=True)
        (root / "graphs" / "s" / "nodes.parquet").write_bytes(b"same")
        (root / "README.md").write_text(card)
        (root / "report").mkdir()
        (root / "report" / "README.md").write_text(f"# r\n\n## Stage timings\n\n| x | {seconds} |\n\n## Next\nsame\n")
        (root / ".locks").mkdir()
        (root / ".locks" / "l").write_text(str(seconds))          # hidden: not compared
        (root / "stats.json").write_text(json.dumps({"ingest": {"in": 3, "out": 2, "rejected": {"x": 1},
                                                                 "seconds": seconds}}))
    (a / "only.txt").write_text("")
    c = compare_runs(a, b)
    assert c["identical"] == 2 and c["different"] == ["README.md"] and c["only_here"] == ["only.txt"]
    assert c["only_there"] == [] and c["stats_counts_equal"]         # the seconds differ by design
    (b / "stats.json").write_text(json.dumps({"ingest": {"in": 3, "out": 3, "rejected": {}}}))
    (b / "report" / "README.md").write_text("# r\n\n## Stage timings\n\n| x | 1 |\n\n## Next\nother\n")
    c = compare_runs(a, b)
    assert not c["stats_counts_equal"] and c["different"] == ["README.md", "report/README.md"]
