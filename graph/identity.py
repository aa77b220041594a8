"""Persistent element identity ``v = phi(site, URL, elem_ctx)`` and virtual nodes.

Runtime bids never enter an identity: the same element seen in two runs (different bids) gets
the same node id, two different elements of one page get different ids. Two identities are
implemented (``graph.build --identity``, recorded in ``graphs/manifest.json``):

``paper`` (the default), App. B's four-tuple:

* the element's accessible role and name;
* its ancestor chain of (role, name) up to the document root, omitting the generic wrapper
  containers (``PAPER_WRAPPER_ROLES``: generic, none, presentation and Chromium's layout-table
  roles). Every kept ancestor keeps its name except the document root, whose name is the page
  title (App. B's example chain starts at a bare ``root``: root -> main -> region "Flight
  search" -> group). Names are cut to 80 characters;
* its ordinal among the sibling nodes of the same role (siblings: the nodes under the same
  nearest chain ancestor, so a wrapper between them does not separate them);
* its subtree signature: the (role, name) of its direct children (text typed into an
  editable field and the item labels of a composite widget left out).

``ours`` (the identity before issue 22) differs in two places: the chain skips every inert
container (``INERT_ROLES``: generic, group, listitem, layout tables, ...) and leaves out the
names of containers named by their content (cells, rows, lists...: ``CONTENT_NAMED_ROLES``),
which change with whatever the widget lists; and the ordinal counts siblings of the same role
*and name*, so that a list gaining an item does not shift the others.

In both, elements that still collide on their page (repeated widgets) get their ancestors'
positions added (``positional_rate``); any that collide after that are ambiguous.

On a flat AXTree (no indentation) the ancestors come from the step's HTML (bid attributes)
when it is there, and otherwise from the structure inferred from the flat text
(:func:`graph.axtree.infer_structure`: frames, landmarks and headings as section anchors,
composites and runs of their items); ``context`` records which ('axtree', 'html', 'flat', or
'none' for a flat tree given neither) so a consumer knows how much to trust the identity.

Identity is linear in the size of the tree: a chain is keyed by a hash chained from its
parent's key, never copied or serialized per element (see :class:`PageContext`).
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
# ``graph.build --containment``: where an element's containment edge (E_s) goes. §4.1 counts
# containment between the controls themselves ("options within comboboxes"): in ``paper``,
# composite widgets, grid cells and headers, which group controls without being one, are passed
# over to the nearest control above; ``ours`` stops at them (denser E_s: graph distances shrink
# inside lists, grids and tab bars).
CONTAINMENTS = ("paper", "ours")
DEFAULT_CONTAINMENT = "paper"
GROUPING_ROLES = frozenset({"listbox", "menu", "menubar", "tablist", "radiogroup", "tree", "grid", "treegrid",
                            "toolbar", "gridcell", "columnheader", "rowheader"})
# Containers whose accessible name is computed from their text content: a table cell's name
# is everything inside it, so it changes whenever a widget lists different items. Their
# names are left out of ancestor chains (the role stays).
CONTENT_NAMED_ROLES = frozenset({"cell", "row", "gridcell", "rowheader", "columnheader", "table", "list",
                                 "article", "tabpanel", "option", "treeitem", "menuitem", "tooltip",
                                 "status", "log", "alert", "note", "feed"})
EDITABLE_ROLES = frozenset({"textbox", "searchbox", "combobox", "textarea", "spinbutton"})
NAME_LIMIT = 80
SIGNATURE_LIMIT = 8
# The identities ``graph.build --identity`` chooses from; App. B's is the default.
IDENTITIES = ("paper", "ours")
DEFAULT_IDENTITY = "paper"
# App. B: the chain omits "non-operable, generic wrapper containers": ARIA's generic (div,
# span), none and presentation, and the roles Chromium gives a table it exposes as layout only.
PAPER_WRAPPER_ROLES = frozenset({"generic", "none", "presentation", "LayoutTable", "LayoutTableRow",
                                 "LayoutTableCell", "LayoutTableColumn"})
# Ancestors (and positions) kept for display per element; the identity hashes all of them.
ANCESTORS_SHOWN = 32

# The page of an identity (``data.sites.normalize_url_path``, remembered there).
page_path = normalize_url_path

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


def _link(parent: bytes, item) -> bytes:
    """The key of a chain one item longer than the chain keyed ``parent``: chains are hashed
    incrementally, so no chain is ever copied or serialized per element (linear in the tree)."""
    return hashlib.blake2b(parent + repr(item).encode("utf-8", "surrogatepass"), digest_size=16).digest()


_ROOT_KEY = b"\0" * 16
_EMPTY_CHAIN = (_ROOT_KEY, (), 0)   # (key, items shown, length) of a chain with no item


def _fill_up(start, parent, memo, compute) -> None:
    """Make ``memo[start]`` known, where ``memo[x] = compute(x, memo[parent(x)])`` (None for the
    root's parent): walk up to the nearest known answer, then fill in downwards. Every answer is
    computed once, so filling a whole tree is linear (no recursion: deep trees exist). ``memo`` is
    a list indexed by node (None: unknown) or a dict."""
    known = (lambda k: k in memo) if isinstance(memo, dict) else (lambda k: memo[k] is not None)
    pending, i = [], start
    while i is not None and not known(i):
        pending.append(i)
        i = parent(i)
    for j in reversed(pending):
        p = parent(j)
        memo[j] = compute(j, None if p is None else memo[p])


@dataclass(slots=True)
class ElementContext:
    """Everything ``phi`` hashes, kept readable for the node table."""

    role: str
    name: str
    # (role, name) of the chain's ancestors, root first; only the nearest ``ANCESTORS_SHOWN``
    # are kept for display (``elided`` counts the others): the identity hashes the whole chain
    # through ``chain_key``.
    ancestors: tuple[tuple[str, str], ...]
    ordinal: int                             # among logical siblings of the same role (paper) / role and name (ours)
    signature: tuple[tuple[str, str], ...]   # (role, name) of direct children
    context: str                             # 'axtree' | 'html' | 'flat' | 'none'
    # Ancestor ordinals, set only for elements that collide on their page without them
    # (repeated widgets): positions are the least stable part of a page, so they are used
    # only where nothing else tells two elements apart. Display: nearest ANCESTORS_SHOWN.
    positions: tuple[int, ...] | None = None
    page: str = ""                           # normalized URL path of the element's own document
    chain_key: str = ""                      # hash of the whole ancestor chain (incremental)
    positions_key: str = ""                  # hash of the whole positions chain, when set
    elided: int = 0                          # ancestors left out of ``ancestors`` (deep trees)
    identity: str = "paper"                  # the phi that made it (``IDENTITIES``)

    def persistent_id(self, site: str) -> str:
        """``phi(site, URL, elem_ctx)``: the element's persistent identity (its node id)."""
        parts = [site, self.page, self.role, self.name, self.chain_key, self.ordinal, self.signature]
        if self.positions is not None:
            parts.append(self.positions_key)
        return "e-" + _hash(parts)

    def ancestors_json(self) -> list:
        """The stored ``ancestors`` column: ``[[role, name], ...]`` root first, preceded by
        ``["...", "<n> more"]`` when the chain was longer than shown."""
        out = [list(a) for a in self.ancestors]
        return ([["...", f"{self.elided} more"]] + out) if self.elided else out


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


def check_containment(containment: str) -> str:
    if containment not in CONTAINMENTS:
        raise ValueError(f"containment must be one of {CONTAINMENTS}, not {containment!r}")
    return str(containment)


def check_identity(identity: str) -> str:
    if identity not in IDENTITIES:
        raise ValueError(f"identity must be one of {IDENTITIES}, not {identity!r}")
    return str(identity)


class PageContext:
    """Computes element contexts for one parsed observation.

    Everything is linear in the size of the tree: anchors, ordinals, chain keys (hashed
    incrementally from the anchor's key), positions keys and the nearest interactive ancestor
    are one array each, filled once; a chain is materialized only for display, and only its
    nearest ``ANCESTORS_SHOWN`` items."""

    def __init__(self, tree: AXTree, html_parents: dict[str, str | None] | None = None,
                 identity: str = DEFAULT_IDENTITY, memo: dict | None = None):
        self.tree = tree
        # Hashes shared with the other pages of the site (``memo``): chain links by (parent key,
        # item) and element ids by what phi hashes; a page seen again costs dict look-ups.
        memo = {} if memo is None else memo
        self._links: dict = memo.setdefault("links", {})
        self._ids: dict = memo.setdefault("ids", {})
        self.identity = check_identity(identity)
        self.html_parents = html_parents or {}
        nodes = tree.nodes
        if tree.obs_format == "indented" or tree.inferred:
            self.context = "axtree" if tree.obs_format == "indented" else "flat"
        elif html_parents:
            self.context = "html"
        else:
            self.context = "none"
        # The page's structure (containment edges, structurally_near): anchors skip INERT_ROLES.
        self._anchor = self._anchors(INERT_ROLES)
        # The identity's chain: ours skips the same roles; App. B omits only generic wrappers.
        self._id_inert = INERT_ROLES if self.identity == "ours" else PAPER_WRAPPER_ROLES
        self._id_anchor = self._anchor if self.identity == "ours" else self._anchors(PAPER_WRAPPER_ROLES)
        self._frames: list[str | None] | None = None
        self.collided = 0    # elements that needed positions to be told apart (last persistent_ids call)
        self._chains: list[tuple | None] = [None] * len(nodes)       # the chain ending at a node
        self._pos_chains: list[tuple | None] = [None] * len(nodes)   # the positions ending at a node
        self._ordinals: list[int] | None = None
        self._positions: list[int] | None = None
        self._interactive: list | None = None

    # -- structure ---------------------------------------------------------------------------
    def _anchors(self, inert: frozenset) -> list[int | None]:
        """Nearest ancestor of each node whose role is not in ``inert`` (None: none)."""
        tree, nodes = self.tree, self.tree.nodes
        anchor: list[int | None] = [None] * len(nodes)
        if self.context in ("axtree", "flat"):
            # In an inferred structure the sections under a frame root are not linked through
            # it: the flat text tells which section an element is in, not how near two sections are.
            roots = FLAT_UNLINKED_ROLES if tree.inferred else frozenset()
            # Parents precede children in document order, so one forward pass suffices.
            for node in nodes:
                p = node.parent
                if p is not None:
                    role = nodes[p].role
                    if role not in roots:
                        anchor[node.index] = p if role not in inert else anchor[p]
        elif self.context == "html":
            by_bid = tree.by_bid()
            parents = self.html_parents
            first: dict[str, str | None] = {}    # bid -> nearest HTML ancestor that qualifies

            def nearest(b: str, of_parent: str | None) -> str | None:
                p = parents.get(b)
                anc = by_bid.get(p) if p is not None else None
                return p if anc is not None and anc.role not in inert else of_parent

            for node in nodes:
                if node.bid is None or node.bid not in parents:
                    continue
                _fill_up(node.bid, parents.get, first, nearest)
                hit = first[node.bid]
                if hit is not None:
                    anchor[node.index] = by_bid[hit].index
        return anchor

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
                    frames[node.index] = page_path(url) if isinstance(url, str) and url else inherited
                else:
                    frames[node.index] = inherited
            self._frames = frames
        return self._frames[index]

    def anchor(self, index: int) -> int | None:
        """Nearest non-inert ancestor of node ``index`` in the page's structure (INERT_ROLES
        skipped, whatever the identity)."""
        return self._anchor[index]

    def depth(self) -> int:
        """How deep the structure goes: the deepest node (indented or inferred trees) or the
        longest chain of bid-bearing HTML ancestors (flat trees with HTML)."""
        if self.context == "html":
            parents, memo = self.html_parents, {}
            for b in parents:
                _fill_up(b, parents.get, memo, lambda x, up: 0 if up is None else up + 1)
            return max(memo.values(), default=0)
        return max((n.depth for n in self.tree.nodes), default=0)

    def interactive_ancestor(self, index: int) -> tuple[int | None, int]:
        """Nearest interactive ancestor of node ``index`` and the depth gap to it (in the tree,
        or in bid-bearing HTML ancestors for flat trees with HTML); (None, 0) when none."""
        if self._interactive is None:
            self._interactive = self._interactive_ancestors()
        return self._interactive[index]

    def _interactive_ancestors(self) -> list[tuple[int | None, int]]:
        nodes = self.tree.nodes
        out: list[tuple[int | None, int]] = [(None, 0)] * len(nodes)
        if self.context in ("axtree", "flat"):
            # Interactive roles are never inert, so the nearest one is found anchor to anchor;
            # anchors precede their nodes, so one forward pass fills every answer.
            near: list[int | None] = [None] * len(nodes)
            anchors = self._anchor
            for node in nodes:
                a = anchors[node.index]
                if a is None:
                    continue
                up = nodes[a]
                anc = near[node.index] = a if up.bid is not None and up.role in INTERACTIVE_ROLES else near[a]
                if anc is not None:
                    out[node.index] = (anc, node.depth - nodes[anc].depth)
        elif self.context == "html":
            by_bid, parents = self.tree.by_bid(), self.html_parents
            memo: dict[str, tuple[str | None, int]] = {}

            def nearest(b: str, of_parent: tuple | None) -> tuple[str | None, int]:
                p = parents.get(b)
                if p is None:
                    return None, 0
                if p in by_bid and is_interactive(by_bid[p]):
                    return p, 1
                return (of_parent[0], of_parent[1] + 1) if of_parent[0] is not None else (None, 0)

            for node in nodes:
                if node.bid is None or node.bid not in parents:
                    continue
                _fill_up(node.bid, parents.get, memo, nearest)
                up, hops = memo[node.bid]
                if up is not None:
                    out[node.index] = (by_bid[up].index, hops)
        return out

    # -- identity ----------------------------------------------------------------------------
    def _chain_name(self, n: AXNode) -> str:
        """A chain item's name: ours leaves out page titles and content-computed names; App. B
        keeps every name but the document root's (its example chain starts at a bare ``root``)."""
        if n.role == "RootWebArea":
            return ""
        if self.identity == "ours" and n.role in CONTENT_NAMED_ROLES:
            return ""
        return n.name[:NAME_LIMIT]

    def _chain_end(self, memo: list, index: int | None, item_of) -> tuple[bytes, tuple, int]:
        """(key, nearest ``ANCESTORS_SHOWN`` items root first, length) of the identity chain
        ending at node ``index`` (inclusive; None: the empty chain), one ``item_of(node index)``
        per chain node. ``memo`` holds one answer per node: the walk goes up to the nearest known
        answer and fills in downwards, so a whole page costs one hash per chain node, and each
        node keeps at most ``ANCESTORS_SHOWN`` items (linear in the tree, no recursion)."""
        if index is None:
            return _EMPTY_CHAIN
        if memo[index] is None:
            anchors = self._id_anchor
            pending, i = [], index
            while i is not None and memo[i] is None:
                pending.append(i)
                i = anchors[i]
            key, shown, length = _EMPTY_CHAIN if i is None else memo[i]
            links = self._links
            for j in reversed(pending):
                item = item_of(j)
                link = (key, item)
                key = links.get(link)
                if key is None:
                    key = links[link] = _link(*link)
                shown = shown + (item,) if len(shown) < ANCESTORS_SHOWN else shown[1:] + (item,)
                length += 1
                memo[j] = (key, shown, length)
        return memo[index]

    def _chain_item(self, index: int) -> tuple[str, str]:
        n = self.tree.nodes[index]
        return n.role, self._chain_name(n)

    def chain(self, index: int) -> tuple[bytes, tuple[tuple[str, str], ...], int]:
        """The identity chain of node ``index``'s ancestors: its key (the whole chain, hashed
        incrementally), the (role, name) of its nearest ``ANCESTORS_SHOWN`` items root first,
        and its length."""
        return self._chain_end(self._chains, self._id_anchor[index], self._chain_item)

    def positions(self, index: int) -> tuple[bytes, tuple[int, ...]]:
        """The positions of node ``index``'s chain ancestors among their same-label siblings:
        the key of all of them and the nearest ``ANCESTORS_SHOWN``, root first."""
        key, shown, _ = self._chain_end(self._pos_chains, self._id_anchor[index], self._position)
        return key, shown

    def _ordinal(self, index: int) -> int:
        """Index of an element among its logical siblings (same identity anchor) with the same
        role (paper) or the same role and name (ours)."""
        if self._ordinals is None:
            self._ordinals = self._rank(None if self.identity == "paper" else (lambda n: n.name[:NAME_LIMIT]))
        return self._ordinals[index]

    def _position(self, index: int) -> int:
        """Index of an ancestor among its logical siblings with the same role and chain name."""
        if self._positions is None:
            self._positions = self._rank(self._chain_name)
        return self._positions[index]

    def _rank(self, name_of) -> list[int]:
        """Each node's index among the nodes of the same identity anchor, role and ``name_of``
        (None: role only)."""
        counts: dict[tuple, int] = {}
        out = [0] * len(self.tree.nodes)
        anchors, inert = self._id_anchor, self._id_inert
        for n in self.tree.nodes:
            role = n.role
            if role in inert and n.bid is None:
                continue   # never an anchor, never an element
            key = (anchors[n.index], role) if name_of is None else (anchors[n.index], role, name_of(n))
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
        key, shown, length = self.chain(node.index)
        return ElementContext(node.role, node.name[:NAME_LIMIT], shown, self._ordinal(node.index), tuple(sig),
                              self.context, chain_key=key.hex(), elided=length - len(shown), identity=self.identity)

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
            nid = self._element_id(site, ctx)
            out[n.index] = (nid, ctx)
            counts[nid] = counts.get(nid, 0) + 1
        self.collided = 0
        if len(counts) < len(out):      # colliding elements get their ancestors' positions (both modes)
            for idx, (nid, ctx) in list(out.items()):
                if counts[nid] > 1:
                    self.collided += 1
                    key, ctx.positions = self.positions(idx)
                    ctx.positions_key = key.hex()
                    out[idx] = (self._element_id(site, ctx), ctx)
        return out

    def _element_id(self, site: str, ctx: ElementContext) -> str:
        """``ctx.persistent_id(site)``, hashed once per distinct context of the site."""
        key = (site, ctx.page, ctx.role, ctx.name, ctx.chain_key, ctx.ordinal, ctx.signature,
               ctx.positions_key if ctx.positions is not None else None)
        nid = self._ids.get(key)
        if nid is None:
            nid = self._ids[key] = ctx.persistent_id(site)
        return nid


def ambiguous(ids: dict[int, tuple[str, ElementContext]]) -> set[str]:
    """Node ids held by more than one element of the page."""
    seen: set[str] = set()
    dup: set[str] = set()
    for nid, _ in ids.values():
        (dup if nid in seen else seen).add(nid)
    return dup


def html_bid_parents(html: str) -> dict[str, str | None]:
    """bid -> bid of its nearest HTML ancestor that has one (None: none), for every element
    BrowserGym marked with ``bid``. One entry per element: ancestors are walked through this
    map, never copied per element (lxml itself nests at most 256 elements deep)."""
    import lxml.html

    try:
        root = lxml.html.fromstring(html)
    except (ValueError, TypeError):  # lxml raises ParserError (a ValueError) on empty documents
        return {}
    out: dict[str, str | None] = {}
    nearest: dict = {}      # element -> its nearest bid-bearing ancestor-or-self's bid
    for el in root.iter():
        if not hasattr(el, "get"):
            continue
        p = el.getparent()
        up = nearest.get(p) if p is not None else None
        bid = el.get("bid")
        if bid is not None:
            if bid not in out:
                out[bid] = up
            nearest[el] = bid
        else:
            nearest[el] = up
    return out
