"""Persistent element identity ``v = phi(site, URL, elem_ctx)`` and virtual nodes.

Runtime bids never enter an identity: the same element seen in two runs (different bids) gets
the same node id, two different elements of one page get different ids. ``elem_ctx`` is:

* the element's accessible role and name;
* its ancestor chain of (role, name), skipping inert containers (generic, group, listitem,
  layout tables, ...). The root's name (the page title) is left out: titles
  carry counters ("(3) Inbox") that would split a page; so are the names of containers named
  by their content (cells, rows, lists...), which change with whatever the widget lists. Names are cut to 80 characters;
  the chain is stored root first;
* its ordinal among logical siblings (same nearest non-inert ancestor) of the same role and
  name. We deliberately count same (role, name) siblings rather than all same-role siblings:
  a position among all links shifts whenever a list gains an item, which would split an
  element across runs; the ordinal only disambiguates true duplicates;
* its subtree signature: the (role, name) of its direct children.

On a flat AXTree (no indentation) the ancestors come from the step's HTML (bid attributes)
when it is there, and otherwise from the structure inferred from the flat text
(:func:`graph.axtree.infer_structure`: frames, landmarks and headings as section anchors,
composites and runs of their items); ``context`` records which ('axtree', 'html', 'flat', or
'none' for a flat tree given neither) so a consumer knows how much to trust the identity.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

from data.sites import normalize_url_path
from graph.axtree import AXNode, AXTree

# Containers that structure the page without meaning: skipped in ancestor chains.
INERT_ROLES = frozenset({
    "generic", "group", "listitem", "none", "presentation", "paragraph", "strong", "emphasis",
    "Section", "LayoutTable", "LayoutTableRow", "LayoutTableCell", "LayoutTableColumn", "rowgroup",
    "LabelText", "StaticText", "ListMarker", "DescriptionList", "term", "definition", "superscript",
    "subscript", "time", "mark", "code", "Abbr", "abbr", "insertion", "deletion", "blockquote",
    "figure", "Legend", "InlineTextBox", "LineBreak", "caption", "Canvas", "Pre", "sectionheader",
    "sectionfooter", "ruby", "Ruby",
})
# Frame roots: in an inferred (flat) structure, no anchor (see ``PageContext``).
FLAT_UNLINKED_ROLES = frozenset({"RootWebArea", "Iframe"})
COMPOSITE_ROLES = frozenset({"listbox", "menu", "menubar", "tablist", "radiogroup", "tree", "grid", "treegrid",
                             "toolbar", "combobox"})
# Elements an agent acts on. Composite widgets (listbox, menu, tablist, ...) are included so
# that their options / items / tabs get containment edges to them.
INTERACTIVE_ROLES = frozenset({
    "link", "button", "textbox", "searchbox", "combobox", "checkbox", "radio", "option",
    "menuitem", "menuitemcheckbox", "menuitemradio", "tab", "switch", "slider", "spinbutton",
    "treeitem", "gridcell", "columnheader", "rowheader", "textarea", "input",
    "listbox", "menu", "menubar", "tablist", "radiogroup", "tree", "grid", "treegrid", "toolbar",
})
# Containers whose accessible name is computed from their text content: a table cell's name
# is everything inside it, so it changes whenever a widget lists different items. Their
# names are left out of ancestor chains (the role stays).
CONTENT_NAMED_ROLES = frozenset({"cell", "row", "gridcell", "rowheader", "columnheader", "table", "list",
                                 "article", "tabpanel", "option", "treeitem", "menuitem", "tooltip",
                                 "status", "log", "alert", "note", "feed"})
EDITABLE_ROLES = frozenset({"textbox", "searchbox", "combobox", "textarea", "spinbutton"})
NAME_LIMIT = 80
SIGNATURE_LIMIT = 8

class NodeKind(StrEnum):
    """What a graph node is: an interactive element seen in an observation, or a virtual node
    standing for an action without a DOM anchor (never proposed as a negative)."""

    ELEMENT = "element"
    VIRTUAL = "virtual"


class VirtualType(StrEnum):
    """The type of a virtual node (paper: viewport, navigation, tabs, user; plus pointer and
    keyboard for coordinate and keyboard actions)."""

    VIEWPORT = "viewport"
    NAVIGATION = "navigation"
    TABS = "tabs"
    USER = "user"
    POINTER = "pointer"
    KEYBOARD = "keyboard"


_V = VirtualType
# Virtual node type of each action without a DOM anchor.
VIRTUAL_TYPES: dict[str, VirtualType] = {
    "scroll": _V.VIEWPORT, "scroll_at": _V.VIEWPORT, "noop": _V.VIEWPORT,
    "goto": _V.NAVIGATION, "go_back": _V.NAVIGATION, "go_forward": _V.NAVIGATION,
    "new_tab": _V.TABS, "tab_close": _V.TABS, "tab_focus": _V.TABS,
    "send_msg_to_user": _V.USER, "report_infeasible": _V.USER,
    "mouse_move": _V.POINTER, "mouse_up": _V.POINTER, "mouse_down": _V.POINTER, "mouse_click": _V.POINTER,
    "mouse_dblclick": _V.POINTER, "mouse_drag_and_drop": _V.POINTER, "mouse_upload_file": _V.POINTER,
    "keyboard_press": _V.KEYBOARD, "keyboard_up": _V.KEYBOARD, "keyboard_down": _V.KEYBOARD,
    "keyboard_type": _V.KEYBOARD, "keyboard_insert_text": _V.KEYBOARD,
}
# Terminal answers are scoped to the current page; every other virtual node to the landing page.
CURRENT_PAGE_TYPES = frozenset({VirtualType.USER})


def is_interactive(node: AXNode) -> bool:
    return node.bid is not None and node.role in INTERACTIVE_ROLES


def _hash(parts) -> str:
    # repr of nested tuples/lists of str and int is deterministic across runs and platforms.
    return hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(slots=True)
class ElementContext:
    """Everything ``phi`` hashes, kept readable for the node table."""

    role: str
    name: str
    ancestors: tuple[tuple[str, str], ...]   # (role, name) of non-inert ancestors, root first
    ordinal: int                             # among logical siblings with the same role and name
    signature: tuple[tuple[str, str], ...]   # (role, name) of direct children
    context: str                             # 'axtree' | 'html' | 'flat' | 'none'
    # Ancestor ordinals, set only for elements that collide on their page without them
    # (repeated widgets): positions are the least stable part of a page, so they are used
    # only where nothing else tells two elements apart.
    positions: tuple[int, ...] | None = None
    page: str = ""                           # normalized URL path of the element's own document
    chain_key: str = ""                      # repr of ``ancestors``, computed once per anchor

    def persistent_id(self, site: str) -> str:
        """``phi(site, URL, elem_ctx)``: the element's persistent identity (its node id)."""
        parts = [site, self.page, self.role, self.name, self.chain_key or repr(self.ancestors), self.ordinal,
                 self.signature]
        if self.positions is not None:
            parts.append(self.positions)
        return "e-" + _hash(parts)


def virtual_node_id(site: str, url_path: str, vtype: VirtualType, op: str) -> str:
    return "v-" + _hash([site, url_path, str(vtype), op])


@dataclass(frozen=True, slots=True)
class VirtualNode:
    """A virtual node: an action without a DOM anchor, typed and scoped to a page."""

    node_id: str
    vtype: VirtualType
    op: str
    page: str                # the scoping page: the landing page, or the current one for answers

    kind = NodeKind.VIRTUAL


def virtual_node(site: str, op: str, current_page: str, landing_page: str | None) -> VirtualNode:
    """The virtual node of an action without a DOM anchor: terminal answers are scoped to the
    current page, every other virtual node to the landing page (the current page when unknown)."""
    vtype = VIRTUAL_TYPES.get(op, VirtualType.VIEWPORT)
    page = current_page if vtype in CURRENT_PAGE_TYPES else (landing_page or current_page)
    return VirtualNode(virtual_node_id(site, page, vtype, op), vtype, op, page)


class PageContext:
    """Computes element contexts for one parsed observation, memoizing ancestor chains."""

    def __init__(self, tree: AXTree, html_ancestors: dict[str, list[str]] | None = None):
        self.tree = tree
        nodes = tree.nodes
        self.html_ancestors = html_ancestors or {}
        anchor: list[int | None] = [None] * len(nodes)
        if tree.obs_format == "indented" or tree.inferred:
            self.context = "axtree" if tree.obs_format == "indented" else "flat"
            # In an inferred structure the sections under a frame root are not linked through
            # it: the flat text tells which section an element is in, not how near two sections are.
            roots = FLAT_UNLINKED_ROLES if tree.inferred else frozenset()
            # Parents precede children in document order, so one forward pass suffices.
            for node in nodes:
                p = node.parent
                if p is not None and nodes[p].role not in roots:
                    anchor[node.index] = p if nodes[p].role not in INERT_ROLES else anchor[p]
        elif html_ancestors:
            self.context = "html"
            by_bid = tree.by_bid()
            for node in nodes:
                for bid in html_ancestors.get(node.bid or "", ()):
                    anc = by_bid.get(bid)
                    if anc is not None and anc.role not in INERT_ROLES:
                        anchor[node.index] = anc.index
                        break
        else:
            self.context = "none"
        self._anchor = anchor
        self._frames: list[str | None] | None = None
        self.collided = 0    # elements that needed positions to be told apart (last persistent_ids call)
        self._chains: list[tuple | None] = [None] * len(nodes)
        self._chain_keys: dict[int | None, str] = {}
        self._ordinals: list[int] | None = None
        self._positions: list[int] | None = None

    def frame_page(self, index: int) -> str | None:
        """Normalized URL of the iframe document holding node ``index`` (None: the top page).

        A page that keeps its address while its content frame navigates (ServiceNow's UI
        shell) would otherwise fold every page into one; the iframe's own RootWebArea carries
        the URL of what is really shown.
        """
        if self._frames is None:
            nodes = self.tree.nodes
            frames: list[str | None] = [None] * len(nodes)
            for node in nodes:
                p = node.parent
                inherited = frames[p] if p is not None else None
                if p is not None and node.role == "RootWebArea":
                    url = node.props.get("url")
                    frames[node.index] = normalize_url_path(url) if isinstance(url, str) and url else inherited
                else:
                    frames[node.index] = inherited
            self._frames = frames
        return self._frames[index]

    def anchor(self, index: int) -> int | None:
        """Nearest non-inert ancestor of node ``index``."""
        return self._anchor[index]

    def chain(self, index: int) -> tuple[tuple[str, str], ...]:
        """(role, name) of the non-inert ancestors of node ``index``, root first."""
        chains, anchors = self._chains, self._anchor
        # Walk up to the first memoized anchor, then fill in downwards (no recursion: deep
        # trees exist).
        pending, i = [], index
        while i is not None and chains[i] is None:
            pending.append(i)
            i = anchors[i]
        nodes = self.tree.nodes
        for j in reversed(pending):
            a = anchors[j]
            chains[j] = () if a is None else chains[a] + ((nodes[a].role, self._chain_name(nodes[a])),)
        return chains[index]

    def positions(self, index: int) -> tuple[int, ...]:
        """Positions of the chain's ancestors among their same-label siblings, root first."""
        out, a = [], self._anchor[index]
        while a is not None:
            out.append(self._position(a))
            a = self._anchor[a]
        return tuple(reversed(out))

    @staticmethod
    def _chain_name(n: AXNode) -> str:
        return "" if n.role == "RootWebArea" or n.role in CONTENT_NAMED_ROLES else n.name[:NAME_LIMIT]

    def _ordinal(self, index: int) -> int:
        """Index of an element among its logical siblings with the same role and name."""
        if self._ordinals is None:
            self._ordinals = self._rank(lambda n: n.name[:NAME_LIMIT])
        return self._ordinals[index]

    def _position(self, index: int) -> int:
        """Index of an ancestor among its logical siblings with the same role and chain name."""
        if self._positions is None:
            self._positions = self._rank(self._chain_name)
        return self._positions[index]

    def _rank(self, name_of) -> list[int]:
        counts: dict[tuple, int] = {}
        out = [0] * len(self.tree.nodes)
        anchors = self._anchor
        for n in self.tree.nodes:
            if n.role in INERT_ROLES and n.bid is None:
                continue   # never an anchor, never an element
            key = (anchors[n.index], n.role, name_of(n))
            c = counts.get(key, 0)
            out[n.index] = c
            counts[key] = c + 1
        return out

    def element(self, node: AXNode) -> ElementContext:
        """The context of one element, without positional disambiguation."""
        nodes = self.tree.nodes
        editable = node.role in EDITABLE_ROLES
        # A composite widget's items carry state in their labels ("256 GB [add $100.00]"
        # becomes "256 GB" once chosen): its signature keeps their roles only.
        composite = node.role in COMPOSITE_ROLES
        sig = []
        for c in node.children[:SIGNATURE_LIMIT]:
            child = nodes[c]
            # Chromium's InlineTextBox children are line-layout fragments of a text (there or not
            # depending on the browser build, split where the text wraps): never part of identity.
            if child.role == "InlineTextBox":
                continue
            # Text inside an editable field is what was typed into it, not what it is.
            if child.role == "StaticText" and (editable or composite or child.name == node.name):
                continue
            sig.append((child.role, "" if composite else child.name[:30]))
        chain = self.chain(node.index)
        anchor = self._anchor[node.index]
        key = self._chain_keys.get(anchor)
        if key is None:
            key = self._chain_keys[anchor] = repr(chain)
        return ElementContext(node.role, node.name[:NAME_LIMIT], chain, self._ordinal(node.index), tuple(sig),
                              self.context, chain_key=key)

    def persistent_ids(self, site: str, url_path: str, nodes: list[AXNode]) -> dict[int, tuple[str, ElementContext]]:
        """node index -> (node id, context) for ``nodes`` of this page.

        Elements that collide without positions get their ancestor positions added; any that
        still collide are ambiguous (see :func:`ambiguous`).
        """
        out: dict[int, tuple[str, ElementContext]] = {}
        counts: dict[str, int] = {}
        for n in nodes:
            ctx = self.element(n)
            ctx.page = self.frame_page(n.index) or url_path
            nid = ctx.persistent_id(site)
            out[n.index] = (nid, ctx)
            counts[nid] = counts.get(nid, 0) + 1
        self.collided = 0
        if len(counts) < len(out):
            for idx, (nid, ctx) in list(out.items()):
                if counts[nid] > 1:
                    self.collided += 1
                    ctx.positions = self.positions(idx)
                    out[idx] = (ctx.persistent_id(site), ctx)
        return out


def ambiguous(ids: dict[int, tuple[str, ElementContext]]) -> set[str]:
    """Node ids held by more than one element of the page."""
    seen: set[str] = set()
    dup: set[str] = set()
    for nid, _ in ids.values():
        (dup if nid in seen else seen).add(nid)
    return dup


def html_bid_ancestors(html: str) -> dict[str, list[str]]:
    """bid -> bids of its HTML ancestors, nearest first (BrowserGym marks elements with ``bid``)."""
    import lxml.html

    try:
        root = lxml.html.fromstring(html)
    except (ValueError, TypeError):  # lxml raises ParserError (a ValueError) on empty documents
        return {}
    out: dict[str, list[str]] = {}
    for el in root.iter():
        bid = el.get("bid") if hasattr(el, "get") else None
        if bid is None:
            continue
        anc, p = [], el.getparent()
        while p is not None:
            if p.get("bid") is not None:
                anc.append(p.get("bid"))
            p = p.getparent()
        out[bid] = anc
    return out
