"""Deep structure (issue 24 item 4): a flat AXTree of thousands of nested named regions, or an
indented tree as deep, is resolved in memory linear in its size, and graph.build rejects an
observation past its depth or size guard with a counted reason while ingest keeps the row."""

import json
import tracemalloc

import pytest

from data.ingest import ingest
from data.rundir import atomic_write_parquet
from data.schema import StepRecord, steps_to_table
from graph.build import BuildConfig, build_graphs
from graph.resolve import resolve_observation
from hostile_util import balanced, cli, no_traceback, rejects


def nested_regions(n: int) -> str:
    """The probe's shape: ``n`` named regions, each inside the one before (flat text: the
    structure is inferred), each holding a button."""
    lines = ["Tab 0 (current): Deep", "", "[1] RootWebArea 'Deep'"]
    for i in range(n):
        lines.append(f"[r{i}] region 'Region number {i} of the deeply nested page'")
        lines.append(f"[b{i}] button 'Open section {i}'")
    return "\n".join(lines)


def nested_links(n: int) -> str:
    """An indented tree ``n`` levels deep: a named region holding a link and the next region."""
    lines = ["RootWebArea 'Deep'"]
    for i in range(n):
        lines.append("\t" * (i + 1) + f"[g{i}] region 'Region {i} with a fairly long accessible name'")
        lines.append("\t" * (i + 2) + f"[l{i}] link 'Link {i}'")
    return "\n".join(lines)


def _peak(text: str, fmt: str, identity: str) -> int:
    tracemalloc.start()
    try:
        res = resolve_observation(text, fmt, "deep.example", "https://deep.example/", identity=identity)
        assert len(res.bid_to_node) == len(set(res.bid_to_node.values()))     # every element its own node
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("identity", ["paper", "ours"])
@pytest.mark.parametrize("make,fmt", [(nested_regions, "flat"), (nested_links, "indented")])
def test_identity_memory_is_linear_in_depth(make, fmt, identity):
    # Memory per byte of input stays flat from 500 to 2,000 levels (an indented tree's text is
    # itself quadratic in its depth: its tabs). Before, each element's chain was copied and
    # repr'd: 2,000 levels took ~150 MB (flat) and ~120 MB (indented) for inputs of 0.2 and 4 MB.
    small, large = make(500), make(2000)
    per_byte_small = _peak(small, fmt, identity) / len(small)
    peak = _peak(large, fmt, identity)
    assert peak / len(large) < 3 * per_byte_small, (per_byte_small, peak / len(large))
    assert peak < 40 * 2**20, peak


def _step(i: int, obs: str, fmt: str, action: str | None) -> StepRecord:
    return StepRecord(source="webprm", site="deep.example", task_id="t", traj_id="deep", step_idx=i,
                      intent="open it", url="https://deep.example/", observation=obs, obs_format=fmt, html=None,
                      action=action, action_error=None, thought=None, success=True,
                      source_path=f"deep/step_{i}", meta="{}")


def test_guard_rejects_too_deep_and_too_large_with_reasons(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    ok = "[1] RootWebArea 'Deep'\n[b0] button 'Open section 0'"
    steps = [_step(0, ok, "flat", "click('b0')"), _step(1, nested_regions(1500), "flat", "click('b3')"),
             _step(2, ok, "flat", "click('b0')"), _step(3, nested_links(300), "indented", None)]
    atomic_write_parquet(src / "trajectories.parquet", steps_to_table(steps))
    run = tmp_path / "run"
    ingest("canonical", [src / "trajectories.parquet"], run, quiet=True)
    assert balanced(run)["out"] == 4                                   # ingest keeps every row

    stats = build_graphs(run, config=BuildConfig(workers=1, max_nodes=1000))
    assert dict(stats.rejected) == {"too_large": 1}
    s = balanced(run, "graph.build")
    assert s["in"] == 4 and s["out"] == 3
    [r] = rejects(run, "graph.build")
    assert r["reason"] == "too_large" and r["key"] == {"traj_id": "deep", "step_idx": 1}

    proc = cli("graph.build", "--run", str(run), "--workers", "1", "--max-depth", "200")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    s = balanced(run, "graph.build")
    assert s["rejected"] == {"too_deep": 2} and s["out"] == 2
    assert {r["key"]["step_idx"] for r in rejects(run, "graph.build") if r["reason"] == "too_deep"} == {1, 3}
    manifest = json.loads((run / "graphs" / "manifest.json").read_text())
    assert manifest["max_depth"] == 200 and manifest["identity"] == "paper"

    # Without limits the deep observations are built (linear: this takes about a second).
    stats = build_graphs(run, config=BuildConfig(workers=1, max_depth=0, max_nodes=0))
    assert stats.n_out == 4 and not stats.rejected
    assert json.loads((run / "graphs" / "manifest.json").read_text())["totals"]["element_nodes"] >= 1500

    for bad in (["--max-depth", "-1"], ["--max-nodes", "x"], ["--workers", "0"], ["--identity", "mine"]):
        proc = cli("graph.build", "--run", str(run), *bad)
        no_traceback(proc)
        assert proc.returncode == 2 and bad[0] in proc.stderr


def test_structure_inference_stops_at_the_depth_guard():
    # 20,000 nested lists, then 20,000 options: each option looks for its composite among the
    # open scopes, so without the guard inside the inference the work is 20,000 x 20,000 steps
    # before any depth is checked. With it, the inference stops at the first node past the limit.
    from graph.axtree import StructureTooDeep, infer_structure, parse_axtree
    from graph.resolve import TreeLimitExceeded

    text = "\n".join(["[1] RootWebArea 'Deep'"] + [f"[l{i}] list 'List {i}'" for i in range(20000)]
                     + [f"[o{i}] option 'Option {i}'" for i in range(20000)])
    tree = parse_axtree(text, "flat")
    with pytest.raises(StructureTooDeep) as e:
        infer_structure(tree, max_depth=1024)
    assert e.value.depth == 1025
    assert max(n.depth for n in tree.nodes) == 1025 and sum(n.parent is not None for n in tree.nodes) == 1025
    with pytest.raises(TreeLimitExceeded, match="too_deep"):
        resolve_observation(text, "flat", "deep.example", "https://deep.example/", max_depth=1024)
