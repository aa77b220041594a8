"""Observations parsed once: the tables ``graph.build`` writes beside each site's graph, and their reader.

An observation's AXTree text is parsed once per run, by the graph build (issue 42). The build
writes, per site, what it parsed and resolved:

* ``graphs/<site>/parsed_lines.parquet``: the site's distinct AXTree lines, each read once (a
  line's id is its row: ``depth``, ``bid``, ``role``, ``name``, ``value`` (the decoded value's
  ``repr``), ``rest`` (the undecoded properties); ``raw``: the text of a line that is no node, a
  ``Tab`` header or noise). The observations of a site show the same pages again and again, so
  the lines are stored once (the shared traces: 62k lines, 4.3k distinct);
* ``graphs/<site>/parsed.parquet``: one row per observation the build accepted (``traj_id``,
  ``step_idx``, ``obs_format``), its ``lines`` in document order (ids into the lines table: the
  nodes with their depths, hence their parents), where its elements resolved (``elem_pos``: a
  node's index in the tree, ``elem_node``: the row of its node in ``nodes.parquet``) and its
  ``content_page``.

:class:`ParsedSite` reads them back: :meth:`ParsedSite.tree` is the tree ``parse_axtree`` gives
(:func:`graph.axtree.assemble`, no regular expression run), :meth:`ParsedSite.resolution` what
``graph.resolve.resolve_observation`` gives under the graph's identity, without hashing an identity.
Mining, the audit and the pair viewer read these; an observation that is not there (a run built
before issue 42, an observation the build rejected or did not read) is parsed from its text.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data.schema import int32_array, str_array
from graph.axtree import _SCALARS, AXTree, _literal, _read_line, assemble, infer_structure
from graph.identity import INTERACTIVE_ROLES, PageContext, html_bid_parents, page_path
from graph.resolve import Resolution
from graph.schema import reading

LINES_FILE = "parsed_lines.parquet"
OBS_FILE = "parsed.parquet"
GRAPH_BUILD = "python -m graph.build"

# Empty strings stand for "none" (a node's bid and role are never empty, a value's repr neither).
LINE_SCHEMA = pa.schema([
    pa.field("depth", pa.int32(), nullable=False),      # -1: the line is no node
    pa.field("bid", pa.string(), nullable=False),
    pa.field("role", pa.string(), nullable=False),      # "": the line is no node (see ``raw``)
    pa.field("name", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=False),     # repr of the decoded value ("": none)
    pa.field("rest", pa.string(), nullable=False),
    pa.field("raw", pa.string(), nullable=False),       # the text of a line that is no node
])
_IDS = pa.list_(pa.int32())
OBS_SCHEMA = pa.schema([
    pa.field("traj_id", pa.string(), nullable=False),
    pa.field("step_idx", pa.int32(), nullable=False),
    pa.field("obs_format", pa.string(), nullable=False),
    pa.field("content_page", pa.string(), nullable=False),
    pa.field("lines", _IDS, nullable=False),
    pa.field("elem_pos", _IDS, nullable=False),
    pa.field("elem_node", _IDS, nullable=False),
])
_OBS_TEXT = ["traj_id", "step_idx", "obs_format", "content_page"]
# Rows per row group of the two files (their encoding's buffers are a row group's).
LINES_ROW_GROUP = 8192
OBS_ROW_GROUP = 256


# -- writing (graph.build) ---------------------------------------------------------------------------
def _decode_value(text: str):
    """A stored value (``repr`` of the decoded one) decoded: ``_literal``, with the common cases first."""
    if text[0] in "'\"" and "\\" not in text:
        return text[1:-1]
    if text.isdigit():
        return int(text)
    return _literal(text)


def _encode_value(value) -> str | None:
    """A decoded value as text that :func:`_decode_value` decodes back to it (None when none does)."""
    text = repr(value)
    back = _decode_value(text)
    return text if type(back) is type(value) and back == value else None


def _utf8(text: str) -> bool:
    """False for a name holding a lone surrogate (decoded from an escape), which Arrow cannot store."""
    try:
        text.encode()
        return True
    except UnicodeEncodeError:
        return False


def _int_list_array(offsets: array, values: array) -> pa.Array:
    """list<int32> from its offsets and values (int32 arrays) through buffers (``pa.array`` imports
    pandas: ~0.35 s a process)."""
    flat = pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])
    return pa.ListArray.from_arrays(pa.Array.from_buffers(pa.int32(), len(offsets), [None, pa.py_buffer(offsets)]),
                                    flat)


class LineIndex:
    """A site's distinct lines of one format -> their ids, held as each line's 64-bit ``hash`` and
    length in sorted numpy arrays (16 bytes a line; a dict of the lines took ~190: at 10x the
    paper's pool, 17 MB for the largest site's 92k lines). :meth:`lookup` finds a chunk's lines at
    once; :meth:`add` takes the lines new in a chunk. Two lines of one hash and length would read
    as one (about n^2 / 2^65 for n lines: 2e-10 at 92k) unless they arrived in one chunk; a line whose
    hash is taken (by a line of another length, or of the same in its chunk) is kept apart (``spill``)."""

    def __init__(self):
        self.keys = np.empty(0, np.int64)
        self.lens = np.empty(0, np.int32)
        self.ids = np.empty(0, np.int32)
        self.spill: dict[str, int] = {}

    def lookup(self, lines: list[str]) -> list[int]:
        """Each line's id, -1 for those not in the index (nor in ``spill``)."""
        if not len(self.keys) or not lines:
            return [self.spill.get(s, -1) for s in lines]
        h = np.fromiter(map(hash, lines), np.int64, len(lines))
        pos = np.searchsorted(self.keys, h)
        pos[pos == len(self.keys)] = 0
        hit = (self.keys[pos] == h) & (self.lens[pos] == np.fromiter(map(len, lines), np.int32, len(lines)))
        found = np.where(hit, self.ids[pos], -1).tolist()
        if self.spill:       # a spilled line may share its hash and length with an indexed one: it comes first
            spill = self.spill
            found = [spill.get(s, i) for s, i in zip(lines, found)]
        return found

    def add(self, fresh: dict[str, int]) -> None:
        """Lines not in the index (line -> id)."""
        if not fresh:
            return
        lines = list(fresh)
        h = np.fromiter(map(hash, lines), np.int64, len(lines))
        order = np.argsort(h, kind="stable")
        h = h[order]
        taken = np.zeros(len(h), bool)
        if len(self.keys):
            pos = np.searchsorted(self.keys, h)
            taken = self.keys[np.minimum(pos, len(self.keys) - 1)] == h
        taken[1:] |= h[1:] == h[:-1]       # a hash twice among the new lines: the later ones spill
        for j in np.flatnonzero(taken).tolist():
            s = lines[order[j]]
            self.spill[s] = fresh[s]
        keep = order[~taken]
        h = h[~taken]
        at = np.searchsorted(self.keys, h)
        self.keys = np.insert(self.keys, at, h)
        self.lens = np.insert(self.lens, at, np.fromiter((len(lines[k]) for k in keep.tolist()), np.int32, len(keep)))
        self.ids = np.insert(self.ids, at, np.fromiter((fresh[lines[k]] for k in keep.tolist()), np.int32, len(keep)))


LINE_BATCH = LINES_ROW_GROUP       # distinct lines converted to Arrow at once: a row group of the lines file


class ParsedTables:
    """The two tables of a site (see the module doc), fed chunk by chunk: :meth:`add` takes
    accepted observations (``Observation``: ``row``, ``res``) in row order with the lines memo
    their parse filled (``parse_axtree``'s ``lines``), so that their trees can go once added;
    :meth:`tables` gives the tables once node id -> row of ``nodes.parquet`` is known. An
    observation with a value that would not read back as it was, or a name Arrow cannot store (a
    lone surrogate), is left out (its readers parse its text). ``write_lines``: called with the
    distinct lines ``LINE_BATCH`` at a time as they fill (a row group of ``parsed_lines.parquet``),
    so that a site's lines are not held; without it they are kept for :meth:`tables`. What is held
    of the observations is compact: int32 ids and columns of text."""

    def __init__(self, write_lines: Callable[[pa.Table], None] | None = None):
        self.index: dict[str, LineIndex] = {}      # obs_format -> its distinct lines
        self.n_lines = 0
        self.line_rows: list[tuple] = []      # LINE_SCHEMA's columns, the rows not yet converted
        self.line_batches: list[pa.Table] = []    # the converted ones (with write_lines: not yet written)
        self.write_lines = write_lines
        self.lines_written = 0
        self.obs_text: dict[str, list] = {c: [] for c in _OBS_TEXT}
        self.lines, self.elem_pos, self.elem_nid = array("i"), array("i"), array("i")    # flat, per observation:
        self.lines_at, self.elem_at = array("i", [0]), array("i", [0])                   # where each one's start
        self.node_ix: dict[str, int] = {}     # the elements' node ids, numbered as first met

    def add(self, observations, line_memo: dict) -> None:
        texts = [(o.row["observation"] or "").splitlines() for o in observations]
        known: list[list[int]] = [[]] * len(texts)      # each one's lines' ids in the index (-1: not there)
        formats: dict[str, list[int]] = {}
        for n, o in enumerate(observations):
            formats.setdefault(o.res.tree.obs_format, []).append(n)
        for fmt, ns in formats.items():       # the index is per format: a line reads by its format
            found = self.index.setdefault(fmt, LineIndex()).lookup([s for n in ns for s in texts[n]])
            at = 0
            for n in ns:
                known[n] = found[at:at + len(texts[n])]
                at += len(texts[n])
        fresh: dict[str, dict[str, int]] = {fmt: {} for fmt in formats}     # lines new in this chunk
        line_rows = self.line_rows
        for o, lines, ids in zip(observations, texts, known):
            fmt = o.res.tree.obs_format
            new, memo = fresh[fmt], line_memo.get(fmt, {})
            seq = array("i")
            for raw, i in zip(lines, ids):
                if i < 0:
                    i = new.get(raw, -1)
                if i < 0:
                    f = memo.get(raw, False)
                    if f is False:
                        f = _read_line(raw, fmt == "indented")
                    if f is None:
                        row = (-1, "", "", "", "", "", raw)
                    else:
                        value = "" if f[4] is None else _encode_value(f[4])
                        if value is None or not _utf8(f[3]):
                            seq = None
                            break
                        row = (f[0], f[1] or "", f[2], f[3], value, f[5], "")
                    i = new[raw] = self.n_lines
                    self.n_lines += 1
                    line_rows.append(row)
                    if len(line_rows) == LINE_BATCH:
                        self._convert_lines()
                seq.append(i)
            if seq is not None:
                self._add_observation(o, fmt, seq)
        for fmt, new in fresh.items():
            self.index[fmt].add(new)

    def _add_observation(self, o, fmt: str, seq: array) -> None:
        tree, b2n = o.res.tree, o.res.bid_to_node
        text = self.obs_text
        text["traj_id"].append(o.row["traj_id"])
        text["step_idx"].append(o.row["step_idx"])
        text["obs_format"].append(fmt)
        text["content_page"].append(o.res.content_page)
        self.lines.extend(seq)
        self.lines_at.append(len(self.lines))
        node_ix = self.node_ix
        for n in tree.nodes:
            if n.bid in b2n:
                nid = b2n[n.bid]
                self.elem_pos.append(n.index)
                self.elem_nid.append(node_ix.setdefault(nid, len(node_ix)))
        self.elem_at.append(len(self.elem_pos))

    def tables(self, node_rows: dict[str, int]) -> tuple[pa.Table | None, pa.Table]:
        """The lines (None when they went to ``write_lines``: the last ones go now) and the observations."""
        t = self.obs_text
        row_of = [node_rows[n] for n in self.node_ix]
        elem_node = array("i", (row_of[j] for j in self.elem_nid))
        obs = pa.Table.from_arrays([str_array(t["traj_id"]), int32_array(t["step_idx"]), str_array(t["obs_format"]),
                                    str_array(t["content_page"]), _int_list_array(self.lines_at, self.lines),
                                    _int_list_array(self.elem_at, self.elem_pos),
                                    _int_list_array(self.elem_at, elem_node)], schema=OBS_SCHEMA)
        if self.line_rows or not self.line_batches:
            self._convert_lines()
        if self.write_lines:
            self._write_lines(final=True)
            return None, obs
        return pa.concat_tables(self.line_batches).combine_chunks(), obs

    def _convert_lines(self) -> None:
        cols = list(zip(*self.line_rows)) or [()] * len(LINE_SCHEMA)
        self.line_batches.append(pa.Table.from_arrays([int32_array(cols[0]), *map(str_array, cols[1:])],
                                                      schema=LINE_SCHEMA))
        self.line_rows.clear()
        if self.write_lines and sum(map(len, self.line_batches)) >= LINES_ROW_GROUP:
            self._write_lines(final=False)

    def _write_lines(self, final: bool) -> None:
        """The converted lines to ``write_lines``, in whole row groups (all of them when ``final``)."""
        table = pa.concat_tables(self.line_batches).combine_chunks()
        n = len(table) if final else len(table) - len(table) % LINES_ROW_GROUP
        if n or (final and not self.lines_written):       # an empty table too: the file has its schema
            self.write_lines(table.slice(0, n))
            self.lines_written += n
        self.line_batches = [table.slice(n)] if n < len(table) else []


# -- reading -------------------------------------------------------------------------------------------
class SiteLines:
    """A site's distinct lines (``parsed_lines.parquet``) and its parsed observations
    (``parsed.parquet``), both as read (Arrow: compact): what every run of the site's observations
    shares (read once per site by a job that mines them a run at a time). A run decodes only the
    lines its observations use (:meth:`decode`): a site's distinct lines grow with its pages."""

    def __init__(self, site_dir: Path, columns: list[str] | None = None):
        """``columns``: only these of the lines (``bid`` and ``role`` for :meth:`bid_roles`)."""
        with reading(site_dir / OBS_FILE, GRAPH_BUILD), pq.ParquetFile(site_dir / LINES_FILE) as f:
            self.table = f.read(columns=columns)
        with reading(site_dir / OBS_FILE, GRAPH_BUILD), pq.ParquetFile(site_dir / OBS_FILE) as f:
            self.observations = f.read()       # the site's parsed observations, as Arrow (ids: compact)

    def decode(self, ids: list[int]) -> tuple[dict[int, str], dict[int, tuple | None], dict[int, str]]:
        """The lines ``ids`` (sorted): raw text, fields (None for a line that is no node) and, for the
        lines whose value is a list or dict, the value's text (decoded again for each tree)."""
        cols = self.table.take(int32_array(ids)).to_pydict()
        raw = dict(zip(ids, cols["raw"]))
        fields: dict[int, tuple | None] = {}
        fresh: dict[int, str] = {}
        for i, depth, bid, role, name, value, rest in zip(
                ids, cols["depth"], cols["bid"], cols["role"], cols["name"], cols["value"], cols["rest"]):
            if not role:
                fields[i] = None
                continue
            v = _decode_value(value) if value else None
            if type(v) not in _SCALARS:
                fresh[i] = value
            fields[i] = (depth, bid or None, role, name, v, rest)
        return raw, fields, fresh

    def bid_roles(self, ids: list[int]) -> dict[int, tuple | None]:
        """The lines ``ids`` as :meth:`decode`'s fields with only the bid and the role filled
        (``(None, bid, role, None, None, None)``; None for a line that is no node)."""
        cols = self.table.select(["bid", "role"]).take(int32_array(ids)).to_pydict()
        return {i: (None, bid or None, role, None, None, None) if role else None
                for i, bid, role in zip(ids, cols["bid"], cols["role"])}


class ParsedSite:
    """One site's parsed observations (``graphs/<site>/parsed*.parquet``), read whole, or only
    those of the trajectories ``trajs`` (a chunk of the site's); ``lines``: the site's
    :class:`SiteLines` when already read; ``bids_only``: only each line's bid and role are read
    (:meth:`target_counts`, what the audit asks: no tree)."""

    def __init__(self, site_dir: Path, trajs: list[str] | None = None, lines: SiteLines | None = None,
                 bids_only: bool = False):
        self.site_dir = site_dir
        self.lines = lines or SiteLines(site_dir, ["bid", "role"] if bids_only else None)
        table = self.lines.observations
        if trajs is not None:
            table = table.filter(pc.is_in(table["traj_id"], value_set=str_array(trajs)))
        if bids_only:
            table = table.select(["traj_id", "step_idx", "lines", "elem_pos", "elem_node"])
        obs = table.to_pydict()
        used: set[int] = set()
        for seq in obs["lines"]:
            used.update(seq)
        self.bids_only = bids_only
        if bids_only:
            self._raw, self._fields, self._fresh = None, self.lines.bid_roles(sorted(used)), {}
        else:
            self._raw, self._fields, self._fresh = self.lines.decode(sorted(used))
        self._index = {k: n for n, k in enumerate(zip(obs["traj_id"], obs["step_idx"]))}
        self._obs = obs
        self._node_ids: list[str] | None = None

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._index

    def tree(self, key: tuple[str, int]) -> AXTree | None:
        """The parsed observation (a fresh tree: callers may infer its structure), None when absent."""
        assert not self.bids_only, "a tree needs every field of its lines"
        n = self._index.get(key)
        if n is None:
            return None
        seq = self._obs["lines"][n]
        raws, fields = self._raw, self._fields
        fs = [fields[i] for i in seq]
        for j, i in enumerate(seq):
            if i in self._fresh:
                f = fs[j]
                fs[j] = (f[0], f[1], f[2], f[3], _decode_value(self._fresh[i]), f[5])
        return assemble([raws[i] for i in seq], fs, self._obs["obs_format"][n])

    def node_ids(self) -> list[str]:
        if self._node_ids is None:
            with reading(self.site_dir / "nodes.parquet", GRAPH_BUILD), \
                    pq.ParquetFile(self.site_dir / "nodes.parquet") as f:
                self._node_ids = f.read(columns=["node_id"]).column("node_id").to_pylist()
        return self._node_ids

    def elements(self, key: tuple[str, int]) -> list[tuple[int, str]]:
        """(node index, node id) of the elements the build resolved, in document order."""
        n = self._index[key]
        ids = self.node_ids()
        return [(p, ids[r]) for p, r in zip(self._obs["elem_pos"][n], self._obs["elem_node"][n])]

    def resolution(self, key: tuple[str, int], url: str, html: str | None, identity: str,
                   memo: dict | None = None) -> Resolution | None:
        """What ``resolve_observation`` gives for this observation under the graph's ``identity``
        with the step's acted-on bid as the build resolved it (the build accepted it, so it is
        within the limits); None when absent."""
        tree = self.tree(key)
        if tree is None:
            return None
        html_parents = html_bid_parents(html) if (html and tree.obs_format == "flat") else None
        if tree.obs_format == "flat" and not html_parents:
            infer_structure(tree)
        page = PageContext(tree, html_parents, identity, memo)
        nodes = tree.nodes
        bid_to_node: dict[str, str] = {}
        node_to_bids: dict[str, list[str]] = {}
        for p, nid in self.elements(key):
            bid = nodes[p].bid
            bid_to_node[bid] = nid
            node_to_bids.setdefault(nid, []).append(bid)
        res = Resolution(self.site_dir.name, page_path(url), tree, page, bid_to_node, node_to_bids,
                         ambiguous={nid for nid, bids in node_to_bids.items() if len(bids) > 1})
        res._content_page = self._obs["content_page"][self._index[key]]
        return res

    def target_counts(self, key: tuple[str, int], targets) -> tuple[dict[str, int], dict[str, int]] | None:
        """For the ``targets`` (bids): how often each occurs among O_t's bids (those that occur), and
        the bids of its node in O_t (those the build resolved), as ``proposals.audit`` re-derives
        both from the text (``bid_counts``, and ``node_bid_counts`` with the targets resolved too);
        None when that would resolve another set of elements than the build did (a target present
        in O_t that the build did not resolve, or a non-interactive element that is no target)."""
        n = self._index[key]
        fields = self._fields
        nodes = [f for f in (fields[i] for i in self._obs["lines"][n]) if f is not None]
        targets = set(targets)
        roles: dict[str, str] = {}
        seen: dict[str, int] = {}
        for f in nodes:
            if f[1] is not None:
                roles[f[1]] = f[2]
                if f[1] in targets:
                    seen[f[1]] = seen.get(f[1], 0) + 1
        ids = self.node_ids()
        got = {nodes[p][1]: ids[r] for p, r in zip(self._obs["elem_pos"][n], self._obs["elem_node"][n])}
        if any(t in roles and t not in got for t in targets) or \
                any(roles[b] not in INTERACTIVE_ROLES and b not in targets for b in got):
            return None
        count: dict[str, int] = {}
        for nid in got.values():
            count[nid] = count.get(nid, 0) + 1
        return seen, {b: count[got[b]] for b in targets if b in got}


class Parsed:
    """The parsed tables of a run's sites, each read when first asked for (``graphs/<site>/``); the
    last ``keep`` sites read are kept (memory stays that of a site, whatever the pool's size: the
    readers ask for one site's observations after another)."""

    def __init__(self, run_root: str | Path, keep: int = 1, trajs: list[str] | None = None,
                 lines: dict[str, SiteLines] | None = None, bids_only: bool = False):
        """``trajs``: only these trajectories' observations are read (a chunk's), else all;
        ``lines``: site -> its :class:`SiteLines`, read once and shared (filled here);
        ``bids_only``: see :class:`ParsedSite`."""
        self.root = Path(run_root)
        self.keep, self.trajs, self.bids_only = keep, trajs, bids_only
        self._lines = {} if lines is None else lines
        self._own_lines = lines is None       # lines read here go with their site when it is dropped
        self._sites: dict[str, ParsedSite | None] = {}

    def site(self, site: str) -> ParsedSite | None:
        if site not in self._sites:
            d = self.root / "graphs" / site
            while len(self._sites) >= self.keep:
                dropped = next(iter(self._sites))
                del self._sites[dropped]
                if self._own_lines:
                    self._lines.pop(dropped, None)
            found = (d / OBS_FILE).exists() and (d / LINES_FILE).exists()
            if found and site not in self._lines:
                self._lines[site] = SiteLines(d, ["bid", "role"] if self.bids_only else None)
            self._sites[site] = ParsedSite(d, self.trajs, self._lines.get(site), self.bids_only) if found else None
        return self._sites[site]

    def sites(self) -> list[str]:
        """The sites whose graphs the manifest lists (none without a manifest)."""
        try:
            return sorted(json.loads((self.root / "graphs" / "manifest.json").read_text())["sites"])
        except (OSError, ValueError, KeyError, TypeError):
            return []
