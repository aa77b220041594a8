"""graph.parsed: what graph.build stores of each observation reads back as parse_axtree and
resolve_observation give it (issue 42 Build 1)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from data.actions import Action, parse_action
from data.ingest import ingest
from graph.axtree import parse_axtree
from graph.build import build_graphs
from graph.parsed import Parsed, _decode_value, _encode_value
from graph.resolve import resolve_observation

BUNDLED = Path(__file__).resolve().parents[2] / "data" / "bundled"


def _fields(tree):
    return [(n.index, n.bid, n.role, n.name, n.depth, n.value, type(n.value), n.rest, n.parent, n.children)
            for n in tree.nodes]


def test_a_chunk_reads_its_trajectories_and_the_site_lines_go_with_the_site(tmp_path):
    """``Parsed(trajs=...)`` holds only those trajectories' observations; the lines a Parsed read
    itself are dropped with their site (the audit asks for every site of a pool in turn: at 10x
    it held every site's lines, 1.2 GB), and shared lines stay with their owner."""
    from graph.parsed import SiteLines

    ingest("webprm", [BUNDLED / "webprm"], tmp_path, quiet=True)
    build_graphs(tmp_path, workers=1, include_failed=True)
    rows = pq.read_table(tmp_path / "trajectories.parquet", columns=["site", "traj_id", "step_idx"]).to_pylist()
    sites = sorted({r["site"] for r in rows if Parsed(tmp_path).site(r["site"]) is not None})
    assert len(sites) >= 2
    parsed = Parsed(tmp_path)
    for site in sites:
        parsed.site(site)
        assert list(parsed._lines) == [site]
    site = sites[0]
    trajs = sorted({r["traj_id"] for r in rows if r["site"] == site})
    shared: dict[str, SiteLines] = {}
    one = Parsed(tmp_path, trajs=trajs[:1], lines=shared).site(site)
    assert {t for t, _ in one._index} == {trajs[0]} and list(shared) == [site]
    assert Parsed(tmp_path, trajs=trajs[:1], lines=shared).site(site).lines is shared[site]


@pytest.mark.parametrize("source,path", [("canonical", "agentlab_workarena.parquet"), ("webprm", "webprm")])
def test_the_stored_observations_read_back_as_parsed_and_resolved(tmp_path, source, path):
    ingest(source, [BUNDLED / path], tmp_path, quiet=True)
    build_graphs(tmp_path, workers=1, include_failed=True)
    parsed = Parsed(tmp_path)
    rows = pq.read_table(tmp_path / "trajectories.parquet").to_pylist()
    compared = 0
    for r in rows:
        site, key = parsed.site(r["site"]), (r["traj_id"], r["step_idx"])
        if site is None or key not in site:
            continue
        got, want = site.tree(key), parse_axtree(r["observation"], r["obs_format"])
        assert (got.obs_format, got.tabs, got.unparsed, _fields(got)) == \
               (want.obs_format, want.tabs, want.unparsed, _fields(want))
        action = parse_action(r["action"]) if r["action"] else None
        extra = (action.bid,) if isinstance(action, Action) and action.bid else ()
        a = site.resolution(key, r["url"], r.get("html"), "paper")
        b = resolve_observation(r["observation"], r["obs_format"], r["site"], r["url"], r.get("html"), extra, "paper")
        assert (a.url, a.bid_to_node, a.node_to_bids, a.ambiguous, a.content_page, a.page.context) == \
               (b.url, b.bid_to_node, b.node_to_bids, b.ambiguous, b.content_page, b.page.context)
        compared += 1
    assert compared >= min(len(rows), 3)


@pytest.mark.parametrize("value", ["plain", "it's", 'say "hi"', "tab\there \\ back", "\uf132 icon", 12, -3, 1.5,
                                   True, False, ["a", 1], {"k": "v"}, ""])
def test_values_read_back_with_their_type(value):
    text = _encode_value(value)
    assert text is not None
    back = _decode_value(text)
    assert back == value and type(back) is type(value)


def test_the_audit_s_bids_only_read_gives_the_full_read_s_target_counts(tmp_path):
    """``Parsed(bids_only=True)`` (the audit's read: each line's bid and role, no tree) gives every
    observation's target counts (each target's bids in O_t, and its node's) as the full read does,
    and no tree."""
    ingest("canonical", [BUNDLED / "agentlab_workarena.parquet"], tmp_path, quiet=True)
    build_graphs(tmp_path, workers=1, include_failed=True)
    full, light = Parsed(tmp_path), Parsed(tmp_path, bids_only=True)
    rows = pq.read_table(tmp_path / "trajectories.parquet", columns=["site", "traj_id", "step_idx"]).to_pylist()
    compared = resolved = 0
    for r in rows:
        key = (r["traj_id"], r["step_idx"])
        a, b = full.site(r["site"]), light.site(r["site"])
        if a is None or key not in a:
            continue
        bids = [n.bid for n in a.tree(key).nodes if n.bid is not None]
        targets = sorted(set(bids))[:5] + ["no-such-bid"]
        counts = a.target_counts(key, targets)
        assert b.target_counts(key, targets) == counts
        if counts is not None:
            assert counts[0] == {t: bids.count(t) for t in targets if t in bids}
            resolved += 1
        compared += 1
    assert compared >= 3 and resolved
    with pytest.raises(AssertionError):
        b.tree(key)


def test_the_line_index_keeps_lines_of_one_hash_apart(monkeypatch):
    """``LineIndex`` finds a line by its hash and length: lines sharing a hash (different lengths)
    keep their own ids, whether they arrive in one chunk or in two."""
    import graph.parsed as gp

    fake = {"x": 1, "yy": 1, "zzz": 1, "w": 2, "vv": 1}
    monkeypatch.setattr(gp, "hash", fake.__getitem__, raising=False)
    index = gp.LineIndex()
    assert index.lookup(["x", "w"]) == [-1, -1]
    index.add({"x": 0})
    assert index.lookup(["x", "yy", "w"]) == [0, -1, -1]
    index.add({"yy": 1, "zzz": 2, "w": 3})          # "yy" and "zzz" share "x"'s hash: kept apart
    assert index.lookup(["zzz", "x", "w", "yy", "vv"]) == [2, 0, 3, 1, -1]


def test_the_lines_go_to_their_file_as_they_fill(tmp_path, monkeypatch):
    """With ``write_lines``, a site's distinct lines leave the build a row group at a time (its
    memory does not grow with them) and make the table the build otherwise holds."""
    import pyarrow as pa

    import graph.build as gb
    import graph.parsed as gp
    from data.rundir import RunDir

    monkeypatch.setattr(gp, "LINES_ROW_GROUP", 64)
    monkeypatch.setattr(gp, "LINE_BATCH", 50)       # conversions that do not fall on row groups
    ingest("canonical", [BUNDLED / "agentlab_workarena.parquet"], tmp_path, quiet=True)
    run = RunDir(tmp_path)
    _, _, per_site, _ = gb.prepare(tmp_path)
    site = max(per_site, key=lambda s: per_site[s]["rows"])
    wanted, traj_steps, in_order = gb.site_plan(run, site, per_site[site]["trajs"])
    kept = gb.build_site_chunks(site, gb.read_site_chunks(run, site, wanted, in_order, gb.CHUNK), traj_steps)
    written: list[pa.Table] = []
    streamed = gb.build_site_chunks(site, gb.read_site_chunks(run, site, wanted, in_order, gb.CHUNK), traj_steps,
                                    write_lines=written.append)
    assert streamed.parsed[0] is None and streamed.parsed[1].equals(kept.parsed[1])
    assert [len(t) for t in written][:-1] == [64] * (len(written) - 1) and len(written) > 2
    assert pa.concat_tables(written).equals(kept.parsed[0])


def test_lines_of_one_hash_and_length_new_in_one_chunk_keep_their_ids(monkeypatch):
    """Two lines of one hash and one length arriving in one chunk: the second is spilled, and it is
    found by its own id afterwards (the spill is looked at first)."""
    import graph.parsed as gp

    monkeypatch.setattr(gp, "hash", {"bb": 5, "cc": 5, "d": 6}.__getitem__, raising=False)
    index = gp.LineIndex()
    index.add({"bb": 0, "cc": 1})
    assert index.lookup(["cc", "bb", "d"]) == [1, 0, -1]
    index.add({"d": 2})
    assert index.lookup(["d", "cc", "bb"]) == [2, 1, 0]
