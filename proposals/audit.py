"""The GMCP audit: re-derive, from the run's files alone, how grounded and how minimal its pairs are.

    python -m proposals.audit --run RUN [--table candidates|preferences] [--json]

For every pair of ``RUN/candidates.parquet`` (or ``RUN/preferences.parquet``, where the positive
is the response at position ``label``) the audit re-parses both action strings and reads the
step's observation O_t as ``graph.build`` parsed and resolved it (``graph.parsed``: its bids and
its elements' nodes under the graph's identity, where the build resolved the same elements the
audit would), or parses and resolves it from ``RUN/trajectories.parquet`` (a run built before
issue 42, No-Graph mining under another identity, a target the build did not resolve); nothing
the miner computed (its ``gmcp`` flag, its node ids, its grounding) is trusted. Paper, App. B:

- a pair is a grounded minimal contrastive pair (GMCP) when both targets are physically present
  and uniquely resolvable in O_t (the bid occurs exactly once in the parsed observation, and
  the negative's persistent node, re-derived from O_t with the graph build's own identity
  function, resolves to exactly one bid) and both actions use the same op;
- the residual splits into *virtual positives* (the positive has no element target: scroll,
  go_back, an answer; the negative is a grounded element), *affordance mismatches* (both
  targets grounded, the ops differ) and *other* (anything that should not happen: a negative
  whose bid is absent from O_t or occurs twice, whose persistent node has several bids there,
  or whose second target (``drag_and_drop``'s ``to_bid``) is absent or not unique, a virtual
  negative, a positive whose target is absent, an unparseable action or observation), counted
  by reason;
- a *hallucinated target* is an element negative whose bid is not in O_t at all;
- an *ambiguous target* is a negative with a target (every target of a multi-target action)
  whose persistent node resolves to more than one bid of O_t (``ambiguous_targets``).

The output is one JSON object: the counts over every row at the top level (``pairs``,
``gmcp_ratio``, ``hallucinated_targets``, ``by_rule``, ``by_axis``, ...), the same counts over
the teacher's seeded sample under ``sample`` (candidates only), and the SHA-256 of the audited
table so that a reader can tell whether the audit is still current. It is written to
``RUN/audit/<table>.json`` (the report reads it there; ``proposals.mine`` writes the candidates
audit the same way and copies it into ``stats.json``). The audit takes the files as they are: a
table edited by hand is audited, never refused as stale. Exit code 1 when any pair is not
grounded (``ambiguous_targets`` and ``hallucinated_targets`` included) or its stored ``gmcp``
flag disagrees with the re-derived one, 2 when a file is missing.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import multiprocessing
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from cli.config import Configurable, make_parser
from cli.errors import error_exit
from data.actions import ELEMENT_OPS, Action, ActionParseError, parse_action
from data.memory import arrow_allocator, fresh_python, release_memory
from data.rundir import RunDir, RunDirError, atomic_write_text
from data.schema import str_array
from graph.axtree import AXTree, AXTreeParseError, parse_axtree
from graph.build import graph_identity, site_row_groups
from graph.identity import DEFAULT_IDENTITY
from graph.parsed import Parsed
from graph.resolve import resolve_observation
from proposals.graphindex import read_columns

TABLES = ("candidates", "preferences")
CATEGORIES = ("gmcp", "virtual_positive", "affordance_mismatch", "other")
# Each action text parsed once (a step's positive is in every pair of the step; a text is read by
# both _targets and classify). Actions are immutable; a text that does not parse raises each time.
_parse = functools.lru_cache(maxsize=1 << 16)(parse_action)


def _ratio(n: int, d: int) -> float:
    return round(n / d, 6) if d else 0.0


def bid_counts(text: str | AXTree | None, obs_format: str | None) -> Counter | None:
    """How often each bid occurs in the parsed observation; None when it cannot be parsed."""
    if isinstance(text, AXTree):
        return Counter(n.bid for n in text.nodes if n.bid is not None)
    try:
        tree = parse_axtree(text or "", obs_format)
    except AXTreeParseError:
        return None
    return Counter(n.bid for n in tree.nodes if n.bid is not None)


def element_targets(action: Action) -> list[str]:
    """Every element an action acts on: its bid, and ``drag_and_drop``'s ``to_bid``."""
    if action.op not in ELEMENT_OPS:
        return []
    return [str(v) for k, v in action.args if k in ("bid", "from_bid", "to_bid")]


def node_bid_counts(tree: AXTree, site: str, url: str, html: str | None, targets: tuple[str, ...],
                    identity: str = DEFAULT_IDENTITY) -> dict[str, int]:
    """bid -> how many bids of O_t its persistent node resolves to, re-derived with the graph
    build's identity function ``identity`` (``graph.resolve``; the targets are resolved even
    when they are not interactive, as the build does for acted-on elements)."""
    res = resolve_observation(tree, tree.obs_format, site, url, html, targets, identity=identity)
    return {bid: len(res.node_to_bids[node]) for bid, node in res.bid_to_node.items()}


def classify(pos_text: str, neg_text: str, counts: Counter | None, node_bids: dict[str, int] | None = None) -> dict:
    """One pair, re-derived: its category, the reason when it is 'other', whether the negative's
    target is hallucinated or its persistent node ambiguous, and both ops (None when an action
    does not parse). ``node_bids`` (bid -> bids of its node in O_t, see ``node_bid_counts``)
    adds the node check; without it only bids are checked."""
    try:
        pos, neg = _parse(pos_text), _parse(neg_text)
    except ActionParseError:
        return {"category": "other", "reason": "unparseable_action", "hallucinated": False, "ambiguous": False,
                "op_pos": None, "op_neg": None}
    out = {"category": "other", "reason": None, "hallucinated": False, "ambiguous": False, "op_pos": pos.op,
           "op_neg": neg.op}
    if counts is None:
        out["reason"] = "unparseable_observation"
        return out
    if neg.op not in ELEMENT_OPS:
        out["reason"] = "virtual_negative"
        return out
    if counts[neg.bid] == 0:
        out["reason"], out["hallucinated"] = "negative_absent", True
        return out
    if counts[neg.bid] > 1:
        out["reason"] = "negative_ambiguous"
        return out
    targets = element_targets(neg)
    for extra in targets[1:]:
        if counts[extra] != 1:
            out["reason"] = "second_target_absent" if counts[extra] == 0 else "second_target_ambiguous"
            return out
    if node_bids is not None and any(node_bids.get(t, 1) > 1 for t in targets):
        out["reason"], out["ambiguous"] = "negative_node_ambiguous", True
        return out
    if pos.op not in ELEMENT_OPS:
        out["category"] = "virtual_positive"
    elif counts[pos.bid] != 1:
        out["reason"] = "positive_absent" if counts[pos.bid] == 0 else "positive_ambiguous"
    elif pos.op != neg.op:
        out["category"] = "affordance_mismatch"
    else:
        out["category"] = "gmcp"
    return out


class _Counts:
    """Pairs, categories and target flags of some classified pairs, counted as they come."""

    __slots__ = ("n", "cat", "hallucinated", "ambiguous")

    def __init__(self):
        self.n, self.cat, self.hallucinated, self.ambiguous = 0, Counter(), 0, 0

    def add(self, r: dict) -> None:
        self.n += 1
        self.cat[r["category"]] += 1
        self.hallucinated += r["hallucinated"]
        self.ambiguous += r.get("ambiguous", False)

    def result(self) -> dict:
        out = {"pairs": self.n}
        for c in CATEGORIES:
            out[c], out[f"{c}_ratio"] = self.cat[c], _ratio(self.cat[c], self.n)
        out["hallucinated_targets"] = self.hallucinated
        out["ambiguous_targets"] = self.ambiguous
        return out


class AuditTally:
    """:func:`audit_records` a record at a time (the audit of a pool never holds its records)."""

    def __init__(self):
        self.all = _Counts()
        self.other_reasons, self.mismatch, self.virtual = Counter(), Counter(), Counter()
        self.first: dict[str, int] = {}     # a direction's or op's first record (ties are listed in that order)
        self.disagrees = 0
        self.groups: dict[str, dict[str, _Counts]] = {"rule": {}, "axis": {}}

    def add(self, r: dict, n: int = 0) -> None:
        """Count one classified record; ``n``: its position in the table (records may come in any order)."""
        self.all.add(r)
        category = r["category"]
        if category == "other":
            self.other_reasons[r["reason"]] += 1
        elif category == "affordance_mismatch":
            key = f"{r['op_pos']}->{r['op_neg']}"
            self.mismatch[key] += 1
            self.first[key] = min(self.first.get(key, n), n)
        elif category == "virtual_positive":
            self.virtual[r["op_pos"]] += 1
            self.first["\x00" + r["op_pos"]] = min(self.first.get("\x00" + r["op_pos"], n), n)
        if r.get("stored_gmcp") is not None and r["stored_gmcp"] != (category == "gmcp"):
            self.disagrees += 1
        for key, groups in self.groups.items():
            (groups.get(r[key]) or groups.setdefault(r[key], _Counts())).add(r)

    def result(self) -> dict:
        out = self.all.result()
        out["other_reasons"] = dict(sorted(self.other_reasons.items()))
        # equal counts in the order of their first record, as a list's Counter.most_common gives them
        out["mismatch_directions"] = dict(sorted(self.mismatch.items(), key=lambda kv: (-kv[1], self.first[kv[0]])))
        out["virtual_positive_ops"] = dict(sorted(self.virtual.items(),
                                                  key=lambda kv: (-kv[1], self.first["\x00" + kv[0]])))
        out["stored_gmcp_disagrees"] = self.disagrees
        for key, groups in self.groups.items():
            out[f"by_{key}"] = {k: c.result() for k, c in sorted(groups.items())}
        return out


def audit_records(records) -> dict:
    """Counts and ratios of classified pairs, overall and per rule and axis."""
    tally = AuditTally()
    for n, r in enumerate(records):
        tally.add(r, n)
    return tally.result()


def _targets(pairs) -> dict[tuple[str, int], set[str]]:
    """The element targets of each step's pairs (both actions), resolved with O_t (``pairs``:
    (traj_id, step_idx, positive, negative))."""
    out: dict[tuple[str, int], set[str]] = {}
    for traj, step, pos, neg in pairs:
        got = out.get((traj, step))
        if got is None:
            got = out[(traj, step)] = set()
        for text in (pos, neg):
            try:
                got.update(element_targets(_parse(text)))
            except ActionParseError:
                pass
    return out


def mined_identity(run_root: Path) -> str:
    """The identity the negatives' nodes were resolved with when they were mined: the graphs'
    (``graphs/manifest.json``) for graph mining, the default for No-Graph mining (candidates of
    mode ``no_graph``) or a run without graphs."""
    cands = run_root / "candidates.parquet"
    if cands.exists() and "mode" in pq.read_schema(cands).names:
        if set(read_columns(cands, ["mode"]).column("mode").unique().to_pylist()) == {"no_graph"}:
            return DEFAULT_IDENTITY
    if not (run_root / "graphs" / "manifest.json").exists():
        return DEFAULT_IDENTITY
    return graph_identity(RunDir(run_root))


def _observations(run_root: Path, targets: dict[tuple[str, int], set[str]], workers: int = 1,
                  sites: set[str] | None = None) -> dict[tuple[str, int], tuple[Counter, dict[str, int]] | None]:
    """(bid counts, node bid counts) of the observations of the given steps, restricted to each
    step's targets (the only bids ``classify`` looks up), parsed and resolved from
    ``trajectories.parquet`` (only the steps asked for are kept; the first row of a step wins);
    None for an observation that does not parse. ``workers`` > 1: contiguous runs of row groups
    in forked processes; ``sites``: the steps' sites, when known (only their row groups are read)."""
    identity = mined_identity(run_root)
    path = run_root / "trajectories.parquet"
    got = _parsed_observations(run_root, targets, identity, sites)
    targets = {k: v for k, v in targets.items() if k not in got}
    if not targets:
        return got
    f = pq.ParquetFile(path)
    cols = [c for c in ("traj_id", "step_idx", "site", "url", "observation", "obs_format", "html")
            if c in f.schema_arrow.names]
    groups = list(range(f.num_row_groups)) if sites is None else \
        sorted({g for site in sites for g in site_row_groups(f, site)})
    n = max(1, min(workers, len(groups)))
    if n == 1:
        return {**got, **_observe_groups(path, cols, groups, targets, identity)}
    spans = [groups[i * len(groups) // n:(i + 1) * len(groups) // n] for i in range(n)]
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
        for part in pool.map(_observe_groups, [path] * n, [cols] * n, spans, [targets] * n, [identity] * n):
            for key, value in part.items():
                got.setdefault(key, value)
    return got


def _parsed_observations(run_root: Path, targets: dict[tuple[str, int], set[str]], identity: str,
                         sites: set[str] | None = None) -> dict[tuple[str, int], tuple[Counter, dict[str, int]]]:
    """:func:`_observations`' facts of the steps whose O_t ``graph.build`` parsed and resolved under
    ``identity`` (``graph.parsed``: the observation's bids, and its elements' nodes, which the
    build's identity function derived from O_t), where that resolution is the one the audit's own
    would give (see ``ParsedSite.target_counts``); the other steps are left to the text."""
    parsed = Parsed(run_root)
    if not parsed.sites() or graph_identity(RunDir(run_root)) != identity:
        return {}
    site_of: dict[tuple[str, int], str] = {}
    with pq.ParquetFile(run_root / "trajectories.parquet") as f:
        groups = None if sites is None else sorted({g for site in sites for g in site_row_groups(f, site)})
        for batch in f.iter_batches(8192, columns=["traj_id", "step_idx", "site"], row_groups=groups):
            light = batch.to_pydict()
            for key, site in zip(zip(light["traj_id"], light["step_idx"]), light["site"]):
                if key in targets:
                    site_of.setdefault(key, site)
    by_site: dict[str, list[tuple[str, int]]] = {}
    for key in sorted(site_of, key=lambda k: (site_of[k], k)):
        by_site.setdefault(site_of[key], []).append(key)
    got = {}
    for site, keys in by_site.items():
        # A site's observations AUDIT_TRAJS trajectories at a time (its lines read once, a run
        # decoding those it uses), as mining reads them: a site's parsed tables grow with its pages.
        lines: dict = {}
        trajs = list(dict.fromkeys(t for t, _ in keys))
        for i in range(0, len(trajs), AUDIT_TRAJS):
            part = set(trajs[i:i + AUDIT_TRAJS])
            s = Parsed(run_root, trajs=sorted(part), lines=lines, bids_only=True).site(site)
            if s is None:
                break
            for key in keys:
                if key[0] not in part or key not in s:
                    continue
                wanted = targets[key]
                facts = s.target_counts(key, wanted)
                if facts is not None:
                    got[key] = (Counter(facts[0]), facts[1])
    return got


AUDIT_TRAJS = 8       # trajectories of a site whose parsed observations the audit reads at once


def _observe_groups(path: Path, cols: list[str], groups: list[int], targets: dict[tuple[str, int], set[str]],
                    identity: str) -> dict[tuple[str, int], tuple[Counter, dict[str, int]] | None]:
    """:func:`_observations` over some row groups of the file, in file order."""
    got: dict[tuple[str, int], tuple[Counter, dict[str, int]] | None] = {}
    f = pq.ParquetFile(path)
    gc.disable()       # as proposals.mine's workers: parsing makes millions of short-lived objects
    try:
        _observe_batches(f.iter_batches(columns=cols, row_groups=groups, batch_size=256), targets, identity, got)
    finally:
        gc.enable()
    return got


def _observe_batches(batches, targets: dict[tuple[str, int], set[str]], identity: str, got: dict) -> None:
    """Add the facts of the targeted steps of ``batches`` to ``got`` (the first row of a step wins)."""
    memos: dict[str, dict] = {}
    for batch in batches:
        d = batch.to_pydict()
        for i, key in enumerate(zip(d["traj_id"], d["step_idx"])):
            if key not in targets or key in got:
                continue
            wanted = tuple(sorted(targets[key]))
            try:     # parsed and resolved in one call, with graph.resolve's memo of the site's shared lines and ids
                res = resolve_observation(d["observation"][i] or "", d["obs_format"][i], d["site"][i], d["url"][i],
                                          d["html"][i] if "html" in d else None, wanted, identity=identity,
                                          memo=memos.setdefault(d["site"][i], {}))
            except AXTreeParseError:
                got[key] = None
                continue
            counts = bid_counts(res.tree, None)
            node_bids = {bid: len(res.node_to_bids[node]) for bid, node in res.bid_to_node.items()}
            got[key] = (Counter({b: counts[b] for b in wanted if b in counts}),
                        {b: node_bids[b] for b in wanted if b in node_bids})


def _pairs(path: Path, table: str, extra: tuple[str, ...] = (), sites: set[str] | None = None,
           numbered: bool = False):
    """(traj_id, step_idx, positive, negative, *``extra`` columns) of every row of the table (of the
    ``sites`` only, when given), from its columns a batch at a time (no row dicts): in a preference
    table the positive is the response that ``label`` names. ``numbered``: (row index, that tuple)."""
    actions = ["action_pos", "action_neg"] if table == "candidates" else ["label", "response_1", "response_2"]
    cols = ["traj_id", "step_idx", *actions, *extra]
    start = 0
    wanted = None if sites is None else str_array(sorted(sites))
    for batch in pq.ParquetFile(path).iter_batches(columns=cols + (["site"] if sites is not None else []),
                                                   batch_size=8192):
        n_rows = batch.num_rows
        keep = None
        if wanted is not None:     # the group's rows picked in Arrow: only they are converted
            keep = pc.indices_nonzero(pc.is_in(batch.column(len(cols)), value_set=wanted))
            batch = batch.take(keep)
        c = [batch.column(i).to_pylist() for i in range(len(cols))]
        if table != "candidates":
            label, first, second = c[2:5]
            c[2:5] = [[f if n == 1 else s for n, f, s in zip(label, first, second)],
                      [s if n == 1 else f for n, f, s in zip(label, first, second)]]
        rows = zip(range(start, start + n_rows) if keep is None else (start + i for i in keep.to_pylist()), zip(*c))
        start += n_rows
        yield from (rows if numbered else (r for _, r in rows))


# Pairs whose steps' facts (targets, bid counts) the audit holds at once: the table is audited in
# groups of whole sites of about this many pairs (a pool up to this size: one group, one pass). With
# AUDIT_TRAJS, chosen on the paper's job: the audit's process peaked at 185 MB at 1x; at 10x at 255 MB
# with groups of 32,768 pairs and sites 16 trajectories at a time, 234 MB with 16,384 and 8 (2 s more
# CPU, 18 s), 230 MB with 8,192 and 8 (28 s).
AUDIT_PAIRS = 16384


def audit_table(run_dir: str | Path, table: str = "candidates", workers: int = 1) -> dict:
    """The audit of one table of a run, re-derived from the files (see the module docstring);
    ``workers``: processes that parse and resolve the observations. The table is read a batch at
    a time, for each group of sites of about ``AUDIT_PAIRS`` pairs twice (the targets of each of
    their steps, then each pair classified and counted): what it holds does not grow with the pool."""
    root = Path(run_dir)
    path = root / f"{table}.parquet"
    for need in (path, root / "trajectories.parquet"):
        if not need.exists():
            raise FileNotFoundError(f"{need} not found")
    arrow_allocator()      # Arrow's freed read buffers returned at once, the heap's after each group
    tally, sample = AuditTally(), AuditTally()
    extra = ("rule", "axis", "gmcp", "sampled") if table == "candidates" else ("rule", "axis", "gmcp")
    for sites in _site_groups(path, AUDIT_PAIRS):
        obs = _observations(root, _targets(_pairs(path, table, sites=sites)), workers, sites)
        for n, (traj, step, pos, neg, rule, axis, gmcp, *sampled) in _pairs(path, table, extra, sites, numbered=True):
            counts, node_bids = obs.get((traj, step)) or (None, None)
            rec = classify(pos, neg, counts, node_bids)
            if (traj, step) not in obs and rec["reason"] == "unparseable_observation":
                rec["reason"] = "no_observation"
            rec.update(rule=rule, axis=axis, stored_gmcp=gmcp)
            tally.add(rec, n)
            if sampled and sampled[0]:
                sample.add(rec, n)
        del obs
        _parse.cache_clear()
        release_memory()
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    out = {"table": table, "table_sha256": digest.hexdigest(), **tally.result()}
    if table == "candidates":
        out["sample"] = sample.result()
    return out


def _site_groups(path: Path, size: int) -> list[set[str] | None]:
    """The table's sites in groups of about ``size`` pairs (whole sites, in name order); one group,
    None (every row), when the table is that small or has no ``site`` column."""
    with pq.ParquetFile(path) as f:
        if f.metadata.num_rows <= size or "site" not in f.schema_arrow.names:
            return [None]
        counts: Counter = Counter()
        for batch in f.iter_batches(65536, columns=["site"]):
            counts.update(batch.column(0).to_pylist())
    groups: list[set[str]] = [set()]
    n = 0
    for site in sorted(counts):
        if n and n + counts[site] > size:
            groups.append(set())
            n = 0
        groups[-1].add(site)
        n += counts[site]
    return groups


def write_audit(run_dir: str | Path, table: str = "candidates", workers: int = 1) -> dict:
    """Audit a table and write the result to ``RUN/audit/<table>.json``."""
    audit = audit_table(run_dir, table, workers)
    atomic_write_text(Path(run_dir) / "audit" / f"{table}.json", json.dumps(audit, indent=1, sort_keys=True) + "\n")
    return audit


def write_audit_apart(run_dir: str | Path, table: str = "candidates", workers: int = 1) -> dict:
    """:func:`write_audit` in a fresh Python process (``data.memory.fresh_python``), as
    ``proposals.mine`` runs it after writing the pool: the audit's reads then start from an empty
    heap, not from the one the pool's merge left (at 10x the paper's pool the mining process peaked
    at 346-381 MB auditing in place, the audit alone at ~265 MB)."""
    code = ("import json, sys; from proposals.audit import write_audit; "
            "json.dump(write_audit(sys.argv[1], sys.argv[2], int(sys.argv[3])), sys.stdout)")
    return json.loads(fresh_python(code, str(run_dir), table, str(workers), what=f"the audit of {table}"))


def failures(audit: dict) -> int:
    """Pairs that should not exist: not grounded (an ambiguous or hallucinated target among
    them), or whose stored gmcp flag is wrong."""
    return audit["other"] + audit["stored_gmcp_disagrees"] + audit["ambiguous_targets"] + audit["hallucinated_targets"]


def audit_webprm_rejected(rows: list[dict]) -> dict:
    """The same classification on the rejected actions that come with WebPRM Collection rows
    (multi-policy negatives), to compare them with graph negatives (paper: 24.19% GMCP)."""
    records = []
    for r in rows:
        if r["source"] != "webprm" or not r["action"]:
            continue
        rejected = json.loads(r["meta"] or "{}").get("rejected")
        if isinstance(rejected, list):
            rejected = rejected[0] if rejected else None
        if not isinstance(rejected, dict) or not rejected.get("action"):
            continue
        rec = classify(r["action"], str(rejected["action"]), bid_counts(r["observation"], r["obs_format"]))
        records.append({**rec, "rule": "webprm_rejected", "axis": "multi_policy"})
    out = audit_records(records)
    for key in ("by_rule", "by_axis", "stored_gmcp_disagrees"):
        out.pop(key)
    return out


def format_audit(audit: dict) -> str:
    """A short text table of an audit."""
    lines = [f"{audit['table']}: {audit['pairs']} pairs; GMCP {audit['gmcp_ratio']:.2%} (paper: 74.60%; "
             f"WebArbiter data: 24.19%); virtual positives {audit['virtual_positive_ratio']:.2%}, affordance "
             f"mismatches {audit['affordance_mismatch_ratio']:.2%}, other {audit['other']} {audit['other_reasons']}; "
             f"hallucinated targets {audit['hallucinated_targets']}; ambiguous targets {audit['ambiguous_targets']}; "
             f"stored gmcp flags that disagree {audit['stored_gmcp_disagrees']}"]
    lines.append(f"{'rule':<30} {'pairs':>6} {'GMCP':>8} {'virtual+':>8} {'mismatch':>8} {'other':>6} {'halluc.':>7}")
    for name, group in (*audit["by_rule"].items(), *audit["by_axis"].items()):
        lines.append(f"{name:<30} {group['pairs']:>6} {group['gmcp_ratio']:>8.2%} {group['virtual_positive']:>8} "
                     f"{group['affordance_mismatch']:>8} {group['other']:>6} {group['hallucinated_targets']:>7}")
    if "sample" in audit:
        s = audit["sample"]
        lines.append(f"sample: {s['pairs']} pairs; GMCP {s['gmcp_ratio']:.2%}; virtual positives "
                     f"{s['virtual_positive_ratio']:.2%}; affordance mismatches {s['affordance_mismatch_ratio']:.2%} "
                     f"{s['mismatch_directions']}; other {s['other']}; hallucinated {s['hallucinated_targets']}")
    return "\n".join(lines)


@dataclass
class AuditCommand(Configurable):
    """The flags of ``python -m proposals.audit``."""

    ARG_GROUP = "audit"

    run: str = field(metadata={"help": "run directory holding the table and the graphs"})
    table: str = field(default="candidates", metadata={"choices": TABLES, "help": "the table audited"})
    json: bool = field(default=False, metadata={"help": "print the audit as one JSON object"})


def build_parser():
    ap = make_parser("python -m proposals.audit", __doc__)
    AuditCommand.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = AuditCommand.from_args(build_parser().parse_args(argv))
    try:
        audit = write_audit(args.run, args.table)
    except (FileNotFoundError, RunDirError) as e:
        return error_exit(e)
    print(json.dumps(audit, sort_keys=True) if args.json else format_audit(audit))
    return 1 if failures(audit) else 0


if __name__ == "__main__":
    sys.exit(main())
