"""bench/replay_verdict.py: the hardness descriptors on hand-made observations, the rates and
their intervals, the comparison at equal hardness and the figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.replay_verdict import by, describe, difference, figure, standardized, stats
from graph.axtree import parse_axtree

PAGE = """RootWebArea 'Form', focused
\t[10] form ''
\t\t[11] paragraph ''
\t\t\t[12] textbox 'user'
\t\t[13] textbox 'pass'
\t\t[14] button 'Login'
\t[20] list ''
\t\t[21] listitem ''
\t\t\t[22] link 'one'
\t\t[23] listitem ''
\t\t\t[24] link 'two'
\t[30] button 'Cancel'
"""


@pytest.fixture(scope="module")
def tree():
    return parse_axtree(PAGE, "indented")


@pytest.mark.parametrize("pos, neg, expect", [
    # two fields of one form: same op, GMCP, 12 -> paragraph -> form <- 13: 3 hops, the form holds both
    ("fill('12', 'a')", "fill('13', 'a')", {"same_op": True, "gmcp": True, "distance": 3, "same_container": True}),
    # a link in another list item: 2 up to the list, 2 down; the list is the container of both
    ("click('22')", "click('24')", {"same_op": True, "gmcp": True, "distance": 4, "same_container": True}),
    # the form's button against the page's: through the root, containers form vs none
    ("click('14')", "click('30')", {"same_op": True, "gmcp": True, "distance": 3, "same_container": False}),
    # another op on the same field: distance 0, not GMCP
    ("fill('12', 'a')", "click('12')", {"same_op": False, "gmcp": False, "distance": 0, "same_container": True}),
    # a target that is not in O_t: same op, not GMCP, no distance
    ("click('14')", "click('99')", {"same_op": True, "gmcp": False, "distance": None, "same_container": None}),
])
def test_descriptors_on_a_hand_made_page(tree, pos, neg, expect):
    assert describe(tree, pos, neg) == expect


def row(outcome, distance, same_op=True):
    return {"outcome": outcome, "distance": distance, "same_op": same_op, "gmcp": same_op and distance is not None,
            "same_container": distance is not None and distance <= 2, "rule": "r", "axis": "a", "task": "t"}


def test_rates_count_verdicts_only_and_carry_wilson_intervals():
    rows = [row("equivalent", 1), row("detour", 1), row("harmful", 5), row("replay_mismatch", 5)]
    s = stats(rows)
    fn = s["false_negatives"]
    assert (s["pairs"], s["verdicts"], fn["k"], fn["n"]) == (4, 3, 1, 3)
    assert fn["lo"] < 1 / 3 < fn["hi"]
    assert s["hardness"]["distance_buckets"] == {"0-2": 2, "3-4": 0, "5-6": 1, "7+": 0, "n/a": 0}
    assert list(by(rows, "bucket")) == ["0-2", "5-6"]


def test_difference_interval_holds_the_difference_and_excludes_zero_only_when_far_apart():
    small = stats([row("equivalent", 1)] * 5 + [row("detour", 1)] * 95)["false_negatives"]
    big = stats([row("equivalent", 1)] * 40 + [row("detour", 1)] * 60)["false_negatives"]
    d = difference(big, small)
    assert d["lo"] < d["diff"] < d["hi"] and d["lo"] > 0
    near = stats([row("equivalent", 1)] * 7 + [row("detour", 1)] * 93)["false_negatives"]
    assert difference(near, small)["lo"] < 0 < difference(near, small)["hi"]


def test_standardized_rate_reweights_to_the_reference_hardness():
    # the set is wrong only on near pairs; the reference is all near: at its hardness the rate is 50%
    rows = [row("equivalent", 1), row("detour", 1)] + [row("detour", 8)] * 8
    ref = [row("detour", 1)] * 4
    assert stats(rows)["false_negatives"]["rate"] == pytest.approx(0.1)
    assert standardized(rows, ref) == {"rate": pytest.approx(0.5), "uncovered": 0.0}
    assert standardized([row("detour", 8)], ref)["rate"] is None


def test_figure_is_a_png(tmp_path):
    path = tmp_path / "f.png"
    figure("graph", [row("equivalent", 1), row("detour", 4), row("harmful", None)], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_top_up_draws_new_pool_pairs_until_enough_verdicts(tmp_path, monkeypatch):
    """``bench/replay.py --min-verdicts``: each top-up draws pairs no earlier draw of the set took,
    seeded, and stops once the set's replayed pairs hold the verdicts asked for. The replay is
    replaced by a rule (a pair id ending in 0-7 has a verdict, the rest are mismatches)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import bench.replay as br

    def write(run, sampled):
        run.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"pair_id": [f"p{i:03x}" for i in range(300)],
                                 "sampled": [f"p{i:03x}" in sampled for i in range(300)]}), run / "candidates.parquet")

    def copy(source, run, keep=None, draw=False):
        write(run, keep)

    def verify(*args):
        run = Path(args[args.index("--run") + 1])
        picked = [p for p, s in zip(*pq.read_table(run / "candidates.parquet").to_pydict().values()) if s]
        rows = [{"pair_id": p, "rule": "r", "axis": "a", "gmcp": True, "action_pos": "", "action_neg": "",
                 "replay_outcome": "detour" if p[-1] in "01234567" else "replay_mismatch"} for p in picked]
        for name, keep in (("preferences.parquet", True), ("discarded.parquet", False)):
            pq.write_table(pa.Table.from_pylist([r for r in rows if (r["replay_outcome"] == "detour") == keep],
                                                schema=pa.schema([(k, pa.bool_() if k == "gmcp" else pa.string())
                                                                  for k in rows[0]])), run / name)

    monkeypatch.setattr(br, "sampled_copy", copy)
    monkeypatch.setattr(br, "_cli", verify)
    out = tmp_path / "out"
    first = {f"p{i:03x}" for i in range(0, 300, 7)}          # 43 pairs
    write(out / "graph", first)
    verify("--run", str(out / "graph"))
    cfg = br.ReplayBench(min_verdicts=60, seed=1)
    br.top_up(cfg, out, "graph")
    runs = br.set_runs(out, "graph")
    assert len(runs) >= 2
    draws = [{c["pair_id"] for c in pq.read_table(r / "candidates.parquet").to_pylist() if c["sampled"]} for r in runs]
    assert sum(map(len, draws)) == len(set().union(*draws))             # no pair drawn twice
    verdicts = sum(r["replay_outcome"] != "replay_mismatch" for run in runs for r in br.outcomes(run))
    assert verdicts >= 60
    before = [sorted(d) for d in draws]
    br.top_up(cfg, out, "graph")                                        # enough already: nothing drawn
    assert [sorted({c["pair_id"] for c in pq.read_table(r / "candidates.parquet").to_pylist() if c["sampled"]})
            for r in br.set_runs(out, "graph")] == before
