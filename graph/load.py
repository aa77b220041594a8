"""Graphs in a notebook: ``from graph import load_graph; G = load_graph(RUN, site)``.

The graph is a ``networkx.MultiDiGraph`` whose attributes standard tools take as they are
(``nx.write_graphml``, ``nx.write_gexf``, pandas): nodes carry the columns of ``nodes.parquet``
(``kind`` 'element' | 'virtual', ``role``, ``name``, ``url``, ...), edges those of
``edges.parquet`` (``type`` 'containment' child -> ancestor | 'interaction' v_t -> v_{t+1},
``depth_gap``, ``op``, ``count``, ``trajectories``); edge keys are ``containment`` or
``interaction:<op>``. Every value is a GraphML scalar (str, int, float, bool): list columns
(``bids``, ``ops``, ``values``, ``trajectories``) are JSON text, encoded as the JSON columns
``ancestors``, ``signature`` and ``positions`` already are (``attr_list`` reads either back), and a
null is no attribute at all (a virtual node has no ``ancestors``, a containment edge no ``op``).
The Parquet files keep their own types; only the loaded graph is flattened. (``nx.write_gexf``
puts an edge's ``type`` into GEXF's own edge-type field, which GEXF readers take for a direction
and ``nx.read_gexf`` drops.)

The helpers answer the questions a researcher asks first; ``page_subgraph``, ``neighbourhood``
and ``largest_component`` cut a drawable part out of a site graph, most of whose element nodes
are isolated (an element with no interactive ancestor and no demonstrated action has no edge).
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


def graph_attrs(row: dict) -> dict:
    """A Parquet row as graph attributes: lists as JSON text (``json.dumps(..., ensure_ascii=False)``,
    as the build writes its JSON columns), nulls left out."""
    return {k: json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v for k, v in row.items() if v is not None}


def attr_list(attrs: dict, name: str) -> list:
    """A JSON-encoded list attribute decoded (``[]`` when absent)."""
    return json.loads(attrs[name]) if name in attrs else []


def load_graph(run: str | Path, site: str) -> nx.MultiDiGraph:
    """The Interaction Element Graph of ``site`` in run directory ``run``."""
    d = _site_dir(run, site)
    G = nx.MultiDiGraph(site=site, run=str(run))
    for row in pq.read_table(d / "nodes.parquet").to_pylist():
        G.add_node(row["node_id"], **graph_attrs(row))
    for row in pq.read_table(d / "edges.parquet").to_pylist():
        key = row["type"] if row["type"] == "containment" else f"interaction:{row['op']}"
        G.add_edge(row["src"], row["dst"], key=key, **graph_attrs(row))
    return G


def list_sites(run: str | Path) -> list[str]:
    return sorted(json.loads(RunDir(run).graph_manifest.read_text())["sites"])


def _page_path(url: str) -> str:
    return normalize_url_path(url) if "://" in url else url.rstrip("/") or "/"


def elements_on_page(G: nx.MultiDiGraph, url: str) -> list[str]:
    """Element nodes seen on a page (a URL or an already normalized URL path)."""
    path = _page_path(url)
    return [n for n, a in G.nodes(data=True) if a["kind"] == NodeKind.ELEMENT and a["url"] == path]


def page_subgraph(G: nx.MultiDiGraph, url: str) -> nx.MultiDiGraph:
    """The nodes of one page (a URL or a normalized URL path; element and virtual nodes) and the
    edges between them, as a graph of its own."""
    path = _page_path(url)
    return G.subgraph(n for n, a in G.nodes(data=True) if a["url"] == path).copy()


def neighbourhood(G: nx.MultiDiGraph, node: str, hops: int = 1) -> nx.MultiDiGraph:
    """``node`` and every node within ``hops`` edges of it, either direction, with the edges
    between them (the combined containment + interaction graph)."""
    near = nx.single_source_shortest_path_length(G.to_undirected(as_view=True), node, cutoff=hops)
    return G.subgraph(near).copy()


def largest_component(G: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """The largest weakly connected component (the drawable part of a site graph)."""
    return G.subgraph(max(nx.weakly_connected_components(G), key=len, default=())).copy()


def demonstrated(G: nx.MultiDiGraph, node: str) -> dict:
    """What the demonstrations did on a node: ops, values, count."""
    a = G.nodes[node]
    return {"ops": attr_list(a, "ops"), "values": attr_list(a, "values"), "n_demos": a["n_demos"]}


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
