"""Graphs in a notebook: ``from graph import load_graph; G = load_graph(RUN, site)``.

The graph is a ``networkx.MultiDiGraph``: nodes carry every column of ``nodes.parquet``;
edges carry ``type`` ('containment' child -> ancestor, 'interaction' v_t -> v_{t+1}),
``depth_gap``, ``op``, ``count`` and ``trajectories``; edge keys are ``containment`` or
``interaction:<op>``. The helpers answer the questions a researcher asks first.
"""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pyarrow.parquet as pq

from data.rundir import RunDir
from data.sites import normalize_url_path
from graph.identity import NodeKind


def _site_dir(run: str | Path, site: str) -> Path:
    d = RunDir(run).graph_dir(site)
    if not (d / "nodes.parquet").exists():
        manifest = RunDir(run).graph_manifest
        known = sorted(json.loads(manifest.read_text())["sites"]) if manifest.exists() else []
        raise FileNotFoundError(f"no graph for site {site!r} in {run}; sites: {known or 'none (run graph.build)'}")
    return d


def load_graph(run: str | Path, site: str) -> nx.MultiDiGraph:
    """The Interaction Element Graph of ``site`` in run directory ``run``."""
    d = _site_dir(run, site)
    G = nx.MultiDiGraph(site=site, run=str(run))
    for row in pq.read_table(d / "nodes.parquet").to_pylist():
        G.add_node(row["node_id"], **row)
    for row in pq.read_table(d / "edges.parquet").to_pylist():
        key = row["type"] if row["type"] == "containment" else f"interaction:{row['op']}"
        G.add_edge(row["src"], row["dst"], key=key, **row)
    return G


def list_sites(run: str | Path) -> list[str]:
    return sorted(json.loads(RunDir(run).graph_manifest.read_text())["sites"])


def elements_on_page(G: nx.MultiDiGraph, url: str) -> list[str]:
    """Element nodes seen on a page (a URL or an already normalized URL path)."""
    path = normalize_url_path(url) if "://" in url else url.rstrip("/") or "/"
    return [n for n, a in G.nodes(data=True) if a["kind"] == NodeKind.ELEMENT and a["url"] == path]


def demonstrated(G: nx.MultiDiGraph, node: str) -> dict:
    """What the demonstrations did on a node: ops, values, count."""
    a = G.nodes[node]
    return {"ops": a["ops"], "values": a["values"], "n_demos": a["n_demos"]}


def temporal_successors(G: nx.MultiDiGraph, node: str) -> list[tuple[str, str, int]]:
    """(next node, op of the action on ``node``, count) over the interaction edges."""
    return sorted(((d, e["op"], e["count"]) for _, d, e in G.out_edges(node, data=True)
                   if e["type"] == "interaction"), key=lambda t: -t[2])


def hop_distance(G: nx.MultiDiGraph, a: str, b: str) -> float:
    """Hops between two nodes in the combined (containment + interaction) graph, undirected;
    ``inf`` when unreachable."""
    try:
        return float(nx.shortest_path_length(G.to_undirected(as_view=True), a, b))
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return float("inf")
