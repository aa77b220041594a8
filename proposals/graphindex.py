"""Fast hop distances and node facts over one site's graph (containment + interaction).

networkx is for notebooks; mining asks hundreds of thousands of distance questions, so it uses
plain adjacency sets and a breadth-first search with a cutoff, memoized per source.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data.rundir import RunDir, RunDirError
from graph.identity import NodeKind
from graph.schema import reading, require_columns

INF = float("inf")
GRAPH_BUILD = "python -m graph.build"
# The columns mining reads from each of a site's graph tables.
COLUMNS = {"nodes.parquet": ["node_id", "kind", "url", "ops", "values"],
           "edges.parquet": ["src", "dst", "type"],
           "steps.parquet": ["traj_id", "step_idx", "node_id", "kind", "op"]}


def read_columns(path: Path, columns: list[str]) -> pa.Table:
    """Columns of one Parquet file, read without ``pyarrow.dataset`` (``pq.read_table``'s path,
    whose import brings in pandas: ~0.5 s of a mining command's start)."""
    with pq.ParquetFile(path) as f:
        return f.read(columns=columns)


def check_graphs(run: RunDir) -> list[str]:
    """Before mining: the manifest reads and every site's tables open with the columns mining
    reads (RunDirError otherwise). Returns the sites."""
    try:
        sites = sorted(json.loads(run.graph_manifest.read_text())["sites"])
    except (ValueError, KeyError, TypeError) as e:
        raise RunDirError(f"cannot read {run.graph_manifest}: {e} (rewrite it with `{GRAPH_BUILD}`)") from None
    for site in sites:
        d = run.graph_dir(site)
        if (d / "nodes.parquet").exists():
            for name, cols in COLUMNS.items():
                require_columns(d / name, cols, GRAPH_BUILD)
    return sites


class GraphIndex:
    """Undirected combined adjacency, node facts, interaction successors, demonstrated-op
    counts and the step-to-node mapping (``steps.parquet``) of one site."""

    def __init__(self, site_dir: Path):
        with reading(site_dir, GRAPH_BUILD):
            self._load(site_dir)
        self._memo: dict[tuple[str, int | None], dict[str, int]] = {}

    def _load(self, site_dir: Path) -> None:
        self.adj: dict[str, set[str]] = {}
        self.successors: dict[str, set[str]] = {}     # interaction edges only, directed
        self.nodes: dict[str, dict] = {}
        for row in read_columns(site_dir / "nodes.parquet", COLUMNS["nodes.parquet"]).to_pylist():
            self.nodes[row["node_id"]] = row
        edges = read_columns(site_dir / "edges.parquet", COLUMNS["edges.parquet"]).to_pydict()
        for src, dst, typ in zip(*edges.values()):
            self.adj.setdefault(src, set()).add(dst)
            self.adj.setdefault(dst, set()).add(src)
            if typ == "interaction":
                self.successors.setdefault(src, set()).add(dst)
        # The step-to-node mapping the build wrote (one row per mapped step), and how often each
        # op was demonstrated on each node.
        self.steps: dict[tuple[str, int], tuple[str, NodeKind]] = {}
        self.op_counts: dict[str, Counter] = {}
        steps = read_columns(site_dir / "steps.parquet", COLUMNS["steps.parquet"]).to_pydict()
        for traj, step_idx, node, kind, op in zip(*steps.values()):
            self.steps[(traj, step_idx)] = (node, NodeKind(kind))
            self.op_counts.setdefault(node, Counter())[op] += 1

    def distances(self, source: str, cutoff: int | None = None) -> dict[str, int]:
        """Hop distance from ``source`` to every node within ``cutoff`` hops."""
        key = (source, cutoff)
        got = self._memo.get(key)
        if got is not None:
            return got
        dist = {source: 0}
        if source in self.adj:
            queue = deque([source])
            while queue:
                u = queue.popleft()
                d = dist[u] + 1
                if cutoff is not None and d > cutoff:
                    continue
                for v in self.adj.get(u, ()):
                    if v not in dist:
                        dist[v] = d
                        queue.append(v)
        if len(self._memo) > 4096:
            self._memo.clear()
        self._memo[key] = dist
        return dist

    def distance(self, a: str, b: str, cutoff: int | None = None) -> float:
        return self.distances(a, cutoff).get(b, INF)

    def ops_by_frequency(self, node: str) -> list[str]:
        """The ops demonstrated on the node, most frequent first (ties: alphabetical)."""
        counts = self.op_counts.get(node, Counter())
        return sorted(counts, key=lambda op: (-counts[op], op))

    def values(self, node: str, op: str) -> list[str]:
        prefix = f"{op}:"
        return [v[len(prefix):] for v in self.nodes.get(node, {}).get("values") or [] if v.startswith(prefix)]

    def page_of(self, node: str) -> str | None:
        n = self.nodes.get(node)
        return n["url"] if n else None
