"""Site graphs for the standard networkx tools: attributes are GraphML scalars only (lists as JSON
text, nulls absent), ``nx.write_graphml`` and ``nx.write_gexf`` write them and read back, the
Parquet files keep their columns, and the helpers cut out a page, a neighbourhood and the
largest component."""

from __future__ import annotations

import json

import networkx as nx
import pyarrow.parquet as pq
import pytest

from conftest import BUNDLED
from graph import attr_list, largest_component, load_graph, neighbourhood, page_subgraph
from graph.schema import EDGE_SCHEMA, NODE_SCHEMA

SCALARS = (str, int, float, bool)


@pytest.fixture(scope="module")
def site_graph(tmp_path_factory):
    from data.ingest import ingest
    from graph.build import build_graphs

    run = tmp_path_factory.mktemp("graph_load")
    ingest("canonical", [BUNDLED / "agentlab_workarena.parquet"], run)
    build_graphs(run, workers=1)
    return run, load_graph(run, "servicenow")


def _values(G):
    yield from (v for _, a in G.nodes(data=True) for v in a.values())
    yield from (v for *_, a in G.edges(keys=True, data=True) for v in a.values())
    yield from G.graph.values()


def test_attributes_are_graphml_scalars(site_graph):
    run, G = site_graph
    assert all(isinstance(v, SCALARS) for v in _values(G))          # no list, no None
    nodes = {r["node_id"]: r for r in pq.read_table(run / "graphs/servicenow/nodes.parquet").to_pylist()}
    for n, a in G.nodes(data=True):
        row = nodes[n]
        assert {k for k, v in row.items() if v is not None} == set(a)       # absent means null
        for col in ("bids", "ops", "values"):                                # lists: JSON, one encoding
            assert a[col] == json.dumps(row[col], ensure_ascii=False) and attr_list(a, col) == row[col]
        for col in ("ancestors", "signature"):
            assert col not in a or isinstance(json.loads(a[col]), list)
    virtual = next(a for _, a in G.nodes(data=True) if a["kind"] == "virtual")
    assert "ancestors" not in virtual and attr_list(virtual, "ancestors") == []
    assert all("op" not in e and "depth_gap" in e for *_, e in G.edges(data=True) if e["type"] == "containment")
    assert all(isinstance(json.loads(e["trajectories"]), list) for *_, e in G.edges(data=True))


def test_parquet_files_keep_their_columns(site_graph):
    run, _ = site_graph
    assert pq.read_schema(run / "graphs/servicenow/nodes.parquet").names == NODE_SCHEMA.names
    assert pq.read_schema(run / "graphs/servicenow/edges.parquet").names == EDGE_SCHEMA.names
    assert {"kind"} <= set(NODE_SCHEMA.names) and {"type"} <= set(EDGE_SCHEMA.names)


def test_write_graphml_and_gexf_round_trip(site_graph, tmp_path):
    _, G = site_graph
    nx.write_graphml(G, tmp_path / "g.graphml")
    back = nx.read_graphml(tmp_path / "g.graphml", force_multigraph=True)
    assert back.number_of_nodes() == G.number_of_nodes() and back.number_of_edges() == G.number_of_edges()
    assert all(back.nodes[n] == a for n, a in G.nodes(data=True))        # types and values kept
    assert {(u, v, k): a for u, v, k, a in back.edges(keys=True, data=True)} == \
        {(u, v, k): a for u, v, k, a in G.edges(keys=True, data=True)}
    nx.write_gexf(G, tmp_path / "g.gexf")
    gexf = nx.read_gexf(tmp_path / "g.gexf")
    assert gexf.number_of_nodes() == G.number_of_nodes() and gexf.number_of_edges() == G.number_of_edges()
    n, a = next(iter(G.nodes(data=True)))
    assert {k: gexf.nodes[n][k] for k in ("kind", "role", "n_obs", "interactive")} == \
        {k: a[k] for k in ("kind", "role", "n_obs", "interactive")}


def test_page_neighbourhood_and_component(site_graph):
    _, G = site_graph
    top = max(G, key=lambda n: G.nodes[n]["n_demos"])
    page = G.nodes[top]["url"]
    P = page_subgraph(G, page)
    assert top in P and all(a["url"] == page for _, a in P.nodes(data=True))
    assert P.number_of_nodes() == sum(a["url"] == page for _, a in G.nodes(data=True))
    assert set(P.edges(keys=True)) == {(u, v, k) for u, v, k in G.edges(keys=True) if u in P and v in P}
    assert page_subgraph(G, "https://" + page + "/") .number_of_nodes() == P.number_of_nodes()   # a URL works too
    one, two = neighbourhood(G, top, 1), neighbourhood(G, top, 2)
    assert set(one) == {top} | set(G.successors(top)) | set(G.predecessors(top))
    assert set(one) < set(two) and all(nx.has_path(two.to_undirected(), top, n) for n in two)
    C = largest_component(G)
    assert nx.is_weakly_connected(C)
    assert C.number_of_nodes() == max(len(c) for c in nx.weakly_connected_components(G)) > 1
    assert nx.number_weakly_connected_components(G) > 1          # why the helpers exist: a site is not one piece
