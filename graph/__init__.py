"""graph: the observation model (AXTree) and Interaction Element Graphs.

``from graph import load_graph; G = load_graph(RUN, site)`` gives a networkx graph.
"""

from graph.load import (demonstrated, elements_on_page, hop_distance, list_sites, load_graph,
                            temporal_successors)

__all__ = ["load_graph", "list_sites", "elements_on_page", "demonstrated", "temporal_successors", "hop_distance"]
