"""bench/prm_cpu.py --ground-truth (bench/prm_truth.py, issue 39): the equal training sets, the
random judge, the paired comparison, and the whole bench at --tiny size (slow: it trains and
evaluates the embedded model)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.prm_truth import SETS, RandomScoreJudge, compare, quotas

ROOT = Path(__file__).resolve().parents[2]


def test_quotas_keep_the_task_mix_and_the_cap():
    assert quotas({"a": 3, "b": 5}, 100) == {"a": 3, "b": 5}
    q = quotas({"a": 30, "b": 10, "c": 1}, 20)
    assert sum(q.values()) == 20 and q["a"] > q["b"] > q["c"] >= 0
    assert all(q[t] <= c for t, c in {"a": 30, "b": 10, "c": 1}.items())


def test_random_judge_is_seeded_and_at_chance_under_every_rule():
    from prm.evaluate import evaluate
    from prm.stats import state_table

    prompt = [{"role": "user", "content": "[The Begin of Response 1]\nclick('{i}')\n[The End of Response 1]\n"
                                          "[The Begin of Response 2]\nclick('{j}')\n[The End of Response 2]"}]
    rows = [{"state": i // 4, "pair_idx": i % 4, "expected": 1 + i % 2, "source_name": "miniwob/t", "pair_id": str(i),
             "prompt": [{"role": "user", "content": prompt[0]["content"].format(i=i, j=i + 1000)}]}
            for i in range(400)]
    _, recs = evaluate(RandomScoreJudge(), rows, both_orders=True)
    again = evaluate(RandomScoreJudge(), rows, both_orders=True)[1]
    assert [r["margin"] for r in recs] == [r["margin"] for r in again]
    share = {rule: sum(a for a, _ in state_table(recs, rule).values()) / len(recs)
             for rule in ("both_orders", "as_given", "debiased")}
    assert abs(share["both_orders"] - 0.25) < 0.06
    assert abs(share["as_given"] - 0.5) < 0.07 and abs(share["debiased"] - 0.5) < 0.07


def _records(rate: float, seed: int, states: int = 30) -> list[dict]:
    rng = random.Random(seed)
    return [{"source_name": "miniwob/t", "state": s, "correct": rng.random() < rate, "verdict": 1, "expected": 1,
             "margin": 0.0, "swapped_margin": 0.0} for s in range(states) for _ in range(4)]


def test_differences_are_paired_on_the_same_states():
    tables = {"graph": [_records(0.8, 1), _records(0.7, 2)], "no_graph": [_records(0.4, 3)],
              "random": [_records(0.5, 4)], "base": [_records(0.3, 5)], "random_judge": [_records(0.25, 6)]}
    res = compare(tables, "both_orders", 300)
    acc, diff = res["accuracy"], res["diff"]
    for other, key in (("no_graph", "graph_minus_no_graph"), ("random", "graph_minus_random")):
        for m in ("pairwise", "bon"):
            assert diff[key][m]["estimate"] == pytest.approx(acc["graph"][m]["estimate"] - acc[other][m]["estimate"])
            lo, hi = diff[key][m]["ci"]
            assert lo <= diff[key][m]["estimate"] <= hi
    assert acc["graph"]["seeds"] == 2 and diff["graph_minus_no_graph"]["pairwise"]["ci"][0] > 0
    same = compare({"graph": tables["graph"], "no_graph": tables["graph"]}, "both_orders", 300)["diff"]
    assert same["graph_minus_no_graph"]["pairwise"] == {"estimate": 0.0, "ci": [0.0, 0.0]}


@pytest.mark.slow
def test_tiny_bench_writes_the_comparison(tmp_path):
    out = tmp_path / "truth"
    cmd = [sys.executable, str(ROOT / "bench" / "prm_cpu.py"), "--ground-truth", "--tiny", "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    s = json.loads((out / "summary.json").read_text())
    names = (*SETS, "base", "random_judge")
    for rule in ("both_orders", "as_given", "debiased"):
        r = s["by_rule"][rule]
        assert set(r["accuracy"]) == set(names)
        for name in names:
            for m in ("pairwise", "bon"):
                e = r["accuracy"][name][m]
                assert 0 <= e["ci"][0] <= e["estimate"] <= e["ci"][1] <= 1
        for key, other in (("graph_minus_no_graph", "no_graph"), ("graph_minus_random", "random")):
            for m in ("pairwise", "bon"):
                d = r["diff"][key][m]
                assert d["estimate"] == pytest.approx(r["accuracy"]["graph"][m]["estimate"]
                                                      - r["accuracy"][other][m]["estimate"])
                assert d["ci"][0] <= d["estimate"] <= d["ci"][1]
    assert s["accuracy"] == s["by_rule"]["both_orders"]["accuracy"] and "graph_minus_no_graph" in s["diff"]
    sets = s["training_sets"]
    assert len({sets[k]["pairs"] for k in SETS}) == 1 and sets["graph"]["pairs"] > 0
    assert len({json.dumps(sets[k]["tasks"], sort_keys=True) for k in SETS}) == 1      # equal task mixes
    rejects = [json.loads(x) for x in (out / "train" / "rejects.jsonl").read_text().splitlines()]
    for k in SETS:
        assert sets[k]["in"] == sets[k]["pairs"] + sum(sets[k]["rejected"].values())      # in = out + rejected
        assert sets[k]["rejected"] == {r: sum(x["set"] == k and x["reason"] == r for x in rejects)
                                       for r in sets[k]["rejected"]}
        rows = pq.read_table(out / "train" / f"{k}.parquet").to_pylist()
        assert len(rows) == sets[k]["rows"] and set(sets[k]["outcomes"]) <= {"harmful", "detour"}
        assert s["training"][f"{k}-s0"]["steps"] == len(rows)
    assert s["bench"]["states"] == s["accuracy"]["base"]["states"] > 0
    # resumable: a second invocation finds every step done and writes the same table
    before = (out / "summary.md").read_text()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    assert (out / "summary.md").read_text() == before
