"""graph: the observation model (AXTree) and Interaction Element Graphs.

``from graph import load_graph; G = load_graph(RUN, site)`` gives a networkx graph.
"""

import importlib

__all__ = ["load_graph", "list_sites", "elements_on_page", "demonstrated", "temporal_successors", "hop_distance",
           "page_subgraph", "neighbourhood", "largest_component", "attr_list"]


def __getattr__(name: str):
    """The notebook helpers of :mod:`graph.load`, imported on first use: networkx costs a
    quarter of a second, which ``python -m graph.build`` (and mining) would pay for nothing."""
    if name in __all__:
        return getattr(importlib.import_module("graph.load"), name)
    raise AttributeError(f"module 'graph' has no attribute {name!r}")
