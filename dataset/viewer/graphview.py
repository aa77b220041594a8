"""The neighbourhood of a pair in its site's Interaction Element Graph, laid out server-side
(an SVG drawn by the template: nothing fetched at run time, readable with JavaScript off).

Nodes: the positive's and the negative's nodes, their containment ancestors (the ``containment``
edges child -> ancestor, followed up to the root) and the nodes one temporal (``interaction``)
edge away from either target, in or out. Rows top to bottom: ancestors by depth from the root,
the two targets, the temporal neighbours.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from graph.load import load_graph

WIDTH, ROW_H, MAX_PER_ROW, LABEL_CHARS = 960, 70, 8, 28


def _ancestors(G: nx.MultiDiGraph, node: str) -> list[str]:
    """Containment ancestors of ``node``, parent first (the containment edge points child -> ancestor)."""
    out, seen, todo = [], {node}, [node]
    while todo:
        cur = todo.pop(0)
        for _, dst, data in G.out_edges(cur, data=True):
            if data.get("type") == "containment" and dst not in seen:
                seen.add(dst)
                out.append(dst)
                todo.append(dst)
    return out


def _label(G: nx.MultiDiGraph, node: str) -> str:
    a = G.nodes[node]
    text = f"{a.get('role', '')} {a.get('name', '')}".strip() or node
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def neighbourhood_layout(G: nx.MultiDiGraph, pos_node: str | None, neg_node: str | None) -> dict | None:
    """Nodes with coordinates and edges between them, for the template; None when neither target
    is a node of ``G``."""
    targets = {k: n for k, n in (("pos", pos_node), ("neg", neg_node)) if n is not None and n in G}
    if not targets:
        return None
    ancestors: list[str] = []
    for n in targets.values():
        ancestors += [a for a in _ancestors(G, n) if a not in ancestors and a not in targets.values()]
    temporal: list[str] = []
    for n in targets.values():
        for src, dst, data in [*G.in_edges(n, data=True), *G.out_edges(n, data=True)]:
            other = dst if src == n else src
            if data.get("type") == "interaction" and other not in targets.values() and other not in ancestors \
                    and other not in temporal:
                temporal.append(other)
    # ancestors by depth: the root (no containment parent in the set) first
    depth = {a: len(_ancestors(G, a)) for a in ancestors}
    rows: list[list[str]] = []
    for d in sorted(set(depth.values())):
        rows.append([a for a in ancestors if depth[a] == d][:MAX_PER_ROW])
    rows.append(list(dict.fromkeys(targets.values())))
    if temporal:
        rows.append(temporal[:MAX_PER_ROW])
    role = {n: k for k, n in targets.items()}
    if pos_node is not None and pos_node == neg_node:
        role[pos_node] = "both"
    placed: dict[str, dict] = {}
    for y, row in enumerate(rows):
        for x, node in enumerate(row):
            placed[node] = {"id": node, "label": _label(G, node), "x": round(WIDTH * (x + 1) / (len(row) + 1)),
                            "y": 40 + y * ROW_H, "kind": role.get(node, "temporal" if node in temporal else "ancestor"),
                            "url": G.nodes[node].get("url", "")}
    edges = []
    for src, dst, data in G.edges(data=True):
        if src in placed and dst in placed and src != dst:
            a, b = placed[src], placed[dst]
            edges.append({"x1": a["x"], "y1": a["y"], "x2": b["x"], "y2": b["y"], "type": data.get("type", ""),
                          "op": data.get("op", ""), "count": data.get("count", 0)})
    return {"nodes": list(placed.values()), "edges": edges, "width": WIDTH, "height": 40 + len(rows) * ROW_H,
            "ancestors": len(ancestors), "temporal": len(temporal)}


class GraphCache:
    """Each site's graph loaded once per server (None for a run without one)."""

    def __init__(self, run: Path):
        self.run = run
        self.graphs: dict[str, nx.MultiDiGraph | None] = {}

    def get(self, site: str) -> nx.MultiDiGraph | None:
        if site not in self.graphs:
            try:
                self.graphs[site] = load_graph(self.run, site)
            except (FileNotFoundError, OSError, ValueError):
                self.graphs[site] = None
        return self.graphs[site]
