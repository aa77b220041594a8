"""Resolution: map the elements of one observation to graph nodes, and back to bids."""

from __future__ import annotations

from dataclasses import dataclass, field

from graph.axtree import AXNode, AXTree, StructureTooDeep, infer_structure, parse_axtree
from graph.identity import (
    DEFAULT_IDENTITY,
    INTERACTIVE_ROLES,
    ElementContext,
    PageContext,
    ambiguous,
    html_bid_parents,
    page_path,
)


@dataclass(slots=True)
class Resolution:
    """The interactive elements of one observation and the nodes they map to."""

    site: str
    url: str                                   # normalized URL path of the observation
    tree: AXTree
    page: PageContext
    bid_to_node: dict[str, str]
    node_to_bids: dict[str, list[str]]
    contexts: dict[str, ElementContext] = field(default_factory=dict)   # node id -> context
    ambiguous: set[str] = field(default_factory=set)                    # ids held by several bids
    _content_page: str | None = None

    def unique_bid(self, node_id: str) -> str | None:
        """The one active bid of ``node_id`` here, or None if absent or ambiguous."""
        bids = self.node_to_bids.get(node_id)
        return bids[0] if bids and len(bids) == 1 else None

    def node(self, bid: str) -> AXNode | None:
        return self.tree.by_bid().get(bid)

    @property
    def content_page(self) -> str:
        """The page the observation mostly shows: the document (top page or iframe) holding
        the most interactive elements. It scopes virtual nodes (a scroll on ServiceNow scrolls
        the content frame, whatever the shell's address says)."""
        if self._content_page is not None:
            return self._content_page
        counts: dict[str, int] = {}
        for nid, bids in self.node_to_bids.items():
            page = self.contexts[nid].page
            counts[page] = counts.get(page, 0) + len(bids)
        best = max(counts.items(), key=lambda kv: (kv[1], kv[0] == self.url), default=(self.url, 0))
        self._content_page = best[0]
        return best[0]

    @property
    def ambiguity_rate(self) -> float:
        n = len(self.bid_to_node)
        return sum(len(self.node_to_bids[i]) for i in self.ambiguous) / n if n else 0.0


class TreeLimitExceeded(ValueError):
    """An observation past ``graph.build``'s guards: ``too_large`` (more AXTree nodes than
    ``max_nodes``) or ``too_deep`` (structure deeper than ``max_depth``)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def resolve_observation(observation: str | AXTree, obs_format: str, site: str, url: str,
                        html: str | None = None, extra_bids: tuple[str, ...] = (),
                        identity: str = DEFAULT_IDENTITY, max_depth: int = 0, max_nodes: int = 0,
                        memo: dict | None = None) -> Resolution:
    """Resolve every interactive element (plus ``extra_bids``, e.g. an acted-on image) of an
    observation to its persistent node id under ``identity`` (``paper`` or ``ours``, see
    :mod:`graph.identity`). Raises AXTreeParseError on unparseable text, and
    :class:`TreeLimitExceeded` past ``max_nodes`` nodes or ``max_depth`` levels (0: no limit),
    checked before any element's persistent id is computed.

    ``memo`` (optional) is a dict shared by the observations of one site, which show the same
    pages again and again: each distinct line is parsed once (:func:`graph.axtree.parse_axtree`),
    each distinct chain link and element identity hashed once (:class:`PageContext`)."""
    memo = {} if memo is None else memo
    tree = observation if isinstance(observation, AXTree) else parse_axtree(observation, obs_format,
                                                                            memo.setdefault("lines", {}))
    if max_nodes and len(tree.nodes) > max_nodes:
        raise TreeLimitExceeded("too_large", f"{len(tree.nodes)} AXTree nodes (the limit is {max_nodes})")
    html_parents = html_bid_parents(html) if (html and tree.obs_format == "flat") else None
    if max_nodes and html_parents and len(html_parents) > max_nodes:
        raise TreeLimitExceeded("too_large", f"{len(html_parents)} HTML elements with a bid (the limit is {max_nodes})")
    if tree.obs_format == "flat" and not html_parents:
        try:
            infer_structure(tree, max_depth)     # no HTML to take ancestors from: infer them from the flat text
        except StructureTooDeep as e:
            raise TreeLimitExceeded("too_deep", str(e)) from None
    page = PageContext(tree, html_parents, identity, memo)
    if max_depth:
        depth = page.depth()
        if depth > max_depth:
            raise TreeLimitExceeded("too_deep", f"structure {depth} levels deep (the limit is {max_depth})")
    url_path = page_path(url)
    extra = set(extra_bids)
    elements = [n for n in tree.nodes if n.bid is not None and (n.role in INTERACTIVE_ROLES or n.bid in extra)]
    ids = page.persistent_ids(site, url_path, elements)
    bid_to_node: dict[str, str] = {}
    node_to_bids: dict[str, list[str]] = {}
    contexts: dict[str, ElementContext] = {}
    for n in elements:
        nid, ctx = ids[n.index]
        bid_to_node[n.bid] = nid
        node_to_bids.setdefault(nid, []).append(n.bid)
        contexts[nid] = ctx
    return Resolution(site, url_path, tree, page, bid_to_node, node_to_bids, contexts, ambiguous(ids))
