"""Fast hop distances and node facts over one site's graph (containment + interaction).

networkx is for notebooks; mining asks hundreds of thousands of distance questions, so it uses
plain adjacency sets and a breadth-first search with a cutoff, memoized per source.
"""

from __future__ import annotations

from collections import Counter, deque
from pathlib import Path

import pyarrow.parquet as pq

INF = float("inf")


class GraphIndex:
    """Undirected combined adjacency, node facts, interaction successors and demonstrated-op
    counts of one site."""

    def __init__(self, site_dir: Path):
        self.adj: dict[str, set[str]] = {}
        self.successors: dict[str, set[str]] = {}     # interaction edges only, directed
        self.nodes: dict[str, dict] = {}
        for row in pq.read_table(site_dir / "nodes.parquet",
                                 columns=["node_id", "kind", "url", "ops", "values"]).to_pylist():
            self.nodes[row["node_id"]] = row
        for src, dst, typ in zip(*pq.read_table(site_dir / "edges.parquet", columns=["src", "dst", "type"]).to_pydict().values()):
            self.adj.setdefault(src, set()).add(dst)
            self.adj.setdefault(dst, set()).add(src)
            if typ == "interaction":
                self.successors.setdefault(src, set()).add(dst)
        # How often each op was demonstrated on each node (one row per mapped step).
        self.op_counts: dict[str, Counter] = {}
        for node, op in zip(*pq.read_table(site_dir / "steps.parquet", columns=["node_id", "op"]).to_pydict().values()):
            self.op_counts.setdefault(node, Counter())[op] += 1
        self._memo: dict[tuple[str, int | None], dict[str, int]] = {}

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
