"""graph: the observation model (AXTree) and Interaction Element Graphs.

``from graph import load_graph; G = load_graph(RUN, site)`` gives a networkx graph.
"""

from graph.load import (attr_list, demonstrated, elements_on_page, hop_distance, largest_component, list_sites,
                        load_graph, neighbourhood, page_subgraph, temporal_successors)

__all__ = ["load_graph", "list_sites", "elements_on_page", "demonstrated", "temporal_successors", "hop_distance",
           "page_subgraph", "neighbourhood", "largest_component", "attr_list"]
