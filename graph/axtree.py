"""The observation model: parse AXTree text into nodes.

Two text forms are read:

* ``indented``: BrowserGym's ``flatten_axtree_to_str`` output (AgentLab). Depth is the number
  of leading tabs; a node is ``[bid] role 'name' value='v', prop='x', flag``. Names and
  property values are Python ``repr`` literals (single or double quotes, escapes such as
  ``\\uf132``); unnamed ``generic`` nodes print the role alone; nodes without a bid have no
  ``[...]`` prefix.
* ``flat``: the WebArena / WebPRM Collection form: no indentation, ``[bid] role 'name'
  prop: value prop: value``, after a ``Tab N (current): title`` header. Nesting is gone;
  :func:`infer_structure` derives a parent structure from what the text still carries.

Parsing is on the hot path of graph building (hundreds of nodes per observation), so a line
is read with one regular expression and its properties are decoded only when asked for.
Nothing here knows about graphs; :mod:`graph.identity` builds element identities on top.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# Python string literals, written as unrolled loops (much faster than per-char alternation).
_STR = r"""(?:'[^'\\]*(?:\\.[^'\\]*)*'|"[^"\\]*(?:\\.[^"\\]*)*")"""
_NODE = (r"(?:\[([^\]\s]*)\]\s+)?([A-Za-z][\w-]*)(?: (" + _STR + r"))?"
         r"(?: value=(" + _STR + r"|[^,]*))?(.*)$")
_LINE_TABS = re.compile(r"^(\t*)" + _NODE, re.S)
_STR_FULL = re.compile(_STR, re.S)
_TAB = re.compile(r"^Tab (?P<index>\d+)(?P<current> \(current\))?:\s?(?P<title>.*)$")
_PROP = re.compile(r"\s*,\s*(?P<key>[A-Za-z_][\w-]*)(?:=(?P<val>" + _STR + r"|[^,]*))?")
_FLAT_KEY = re.compile(r"(?:^|\s)(?P<key>[A-Za-z_][\w-]*): ")
_FLAT_REST = re.compile(r"^ [A-Za-z_][\w-]*: ")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_CONSTANTS = {"True": True, "False": False, "None": None}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|.)", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0",
                   "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def _unescape_one(m: re.Match) -> str:
    e = m.group(1)
    if len(e) > 1:
        return chr(int(e[1:], 16))
    return _SIMPLE_ESCAPES.get(e, "\\" + e)


def _unquote(literal: str) -> str:
    """Decode a quoted Python ``repr`` string (what BrowserGym prints) without compiling it."""
    body = literal[1:-1]
    return _ESCAPE.sub(_unescape_one, body) if "\\" in body else body


def _literal(text: str):
    text = text.strip()
    if not text:
        return ""
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if text[0] in "'\"" and _STR_FULL.fullmatch(text):
        return _unquote(text)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def parse_props(rest: str) -> dict | None:
    """Properties after the name: ``, key=value, flag`` (indented) or `` key: value`` (flat).

    None when the text is malformed."""
    props: dict = {}
    if not rest:
        return props
    if rest[0] == ",":
        pos = 0
        while pos < len(rest):
            pm = _PROP.match(rest, pos)
            if not pm or pm.end() == pos:
                return None
            val = pm.group("val")
            props[pm.group("key")] = True if val is None else _literal(val)
            pos = pm.end()
        return props
    if not rest.strip():
        return props
    keys = list(_FLAT_KEY.finditer(rest))
    if not keys or rest[: keys[0].start()].strip():
        return None
    for k, nxt in zip(keys, keys[1:] + [None]):
        raw = rest[k.end(): nxt.start() if nxt else len(rest)].strip()
        props[k.group("key")] = _literal(raw) if raw in _CONSTANTS or _NUMBER.fullmatch(raw) else raw
    return props


@dataclass(slots=True)
class AXNode:
    """One line of an AXTree: an accessibility node."""

    index: int                    # position in the text (document order)
    bid: str | None               # BrowserGym element id, None for nodes without one
    role: str
    name: str
    depth: int
    value: object = None
    rest: str = ""                # undecoded properties; see ``props``
    parent: int | None = None     # index of the parent node (None at the root, or in flat trees
                                  # whose structure was not inferred)
    children: list[int] = field(default_factory=list)

    @property
    def props(self) -> dict:
        """Decoded properties (``url``, ``expanded``, ``checked``, ``focused``...)."""
        return parse_props(self.rest) or {}


@dataclass(slots=True)
class AXTree:
    nodes: list[AXNode]
    obs_format: str
    tabs: list[dict] = field(default_factory=list)       # ``Tab N (current): title`` headers
    unparsed: list[str] = field(default_factory=list)    # lines that are not nodes
    inferred: bool = False       # flat tree whose parents come from :func:`infer_structure`
    _by_bid: dict | None = None
    _dups: list | None = None    # repeated bids, found while parsing

    def by_bid(self) -> dict[str, AXNode]:
        """bid -> node (the first one when a bid repeats; see :meth:`duplicate_bids`)."""
        if self._by_bid is None:
            self._index_bids()
        return self._by_bid

    def duplicate_bids(self) -> list[str]:
        """The bids that more than one node carries, in document order."""
        if self._dups is None:
            self._index_bids()
        return list(self._dups)

    def _index_bids(self) -> None:
        out: dict[str, AXNode] = {}
        dups: list[str] = []
        for n in self.nodes:
            if n.bid is not None:
                if n.bid not in out:
                    out[n.bid] = n
                elif n.bid not in dups:
                    dups.append(n.bid)
        self._by_bid, self._dups = out, dups

    def ancestors(self, node: AXNode) -> list[AXNode]:
        """Parent first, root last."""
        out, i = [], node.parent
        while i is not None:
            out.append(self.nodes[i])
            i = self.nodes[i].parent
        return out


class AXTreeParseError(ValueError):
    """The text holds no AXTree node at all."""


def _read_line(raw: str, indented: bool) -> tuple | None:
    """(depth, bid, role, name, value, rest) of one node line, names and values decoded; None
    for a line that is no node (a ``Tab`` header, noise)."""
    m = _LINE_TABS.match(raw)
    if m is None:
        return None
    tabs, bid, role, name, value, rest = m.groups()
    if rest and rest[0] != "," and rest.strip() and (indented or _FLAT_REST.match(rest) is None):
        return None   # trailing text that is no property list
    if role == "Tab" and not tabs and raw.startswith("Tab "):
        return None
    if name:
        name = name[1:-1] if "\\" not in name else _unquote(name)
    else:
        name = ""
    if value is not None:
        value = _literal(value)
    return len(tabs), bid or None, role, name, value, rest


_SCALARS = (str, int, float, bool, type(None))


def parse_axtree(text: str, obs_format: str | None = None, lines: dict | None = None) -> AXTree:
    """Parse AXTree text. ``obs_format`` is detected when not given (tabs => indented).

    ``lines`` (optional) remembers parsed lines by their text across calls: the observations of
    one site show the same pages again and again (the shared traces: 62k lines, 4.3k distinct),
    so a build passes one dict per site and reads each distinct line once."""
    texts = (text or "").splitlines()
    if obs_format is None:
        obs_format = "indented" if any(l.startswith("\t") for l in texts) else "flat"
    indented = obs_format == "indented"
    memo = {} if lines is None else lines.setdefault(obs_format, {})
    get = memo.get
    fields = []
    for raw in texts:
        f = get(raw, False)
        if f is False:
            f = _read_line(raw, indented)
            if f is None or type(f[4]) in _SCALARS:   # a decoded list or dict is not shared
                memo[raw] = f
        fields.append(f)
    return assemble(texts, fields, obs_format)


def assemble(texts: list[str], fields: list[tuple | None], obs_format: str) -> AXTree:
    """The tree of an observation's lines, each already read (``fields[i]``: ``_read_line``'s
    (depth, bid, role, name, value, rest) of ``texts[i]``, None for a line that is no node):
    what :func:`parse_axtree` does after reading, and what ``graph.parsed`` does with the lines
    the graph build stored."""
    indented = obs_format == "indented"
    nodes: list[AXNode] = []
    tree = AXTree(nodes=nodes, obs_format=obs_format)
    by_bid: dict[str, AXNode] = {}
    dups: list[str] = []
    stack: list[AXNode] = []   # ancestors of the current line, for indented trees
    depths: list[int] = []     # their depths (kept apart: attribute access costs on this path)
    for raw, f in zip(texts, fields):
        if f is None:
            if raw.startswith("Tab ") and (tab := _TAB.match(raw.rstrip())):
                tree.tabs.append({"index": int(tab.group("index")), "current": bool(tab.group("current")),
                                  "title": tab.group("title")})
            elif raw.strip():
                tree.unparsed.append(raw)
            continue
        depth, bid, role, name, value, rest = f
        index = len(nodes)
        if indented:
            while depths and depths[-1] >= depth:
                stack.pop()
                depths.pop()
            if stack:
                parent = stack[-1]
                node = AXNode(index, bid, role, name, depth, value, rest, parent.index, [])
                parent.children.append(index)
            else:
                node = AXNode(index, bid, role, name, depth, value, rest, None, [])
            stack.append(node)
            depths.append(depth)
        else:
            node = AXNode(index, bid, role, name, 0, value, rest, None, [])
        nodes.append(node)
        if bid is not None:
            if bid not in by_bid:
                by_bid[bid] = node
            elif bid not in dups:
                dups.append(bid)
    if not nodes:
        raise AXTreeParseError("no AXTree node found" + (f"; first line: {texts[0][:60]!r}" if texts else ""))
    tree._by_bid, tree._dups = by_bid, dups
    return tree


# -- Structure inference for flat AXTrees --------------------------------------------------------
# A flat AXTree keeps document order, roles, names and bids but not the nesting. What it still
# tells: frame roots (RootWebArea after an Iframe; BrowserGym's bids carry the frame's letter
# prefix), landmarks and headings that open sections, composite widgets followed by runs of
# their items, and items followed by their content.
LANDMARK_ROLES = frozenset({"banner", "navigation", "main", "contentinfo", "complementary", "search", "form",
                            "region", "dialog", "alertdialog", "application"})
# Item role -> the composite roles that hold it.
ITEM_PARENTS = {
    "listitem": frozenset({"list"}), "option": frozenset({"listbox", "combobox", "group"}),
    "menuitem": frozenset({"menu", "menubar"}), "menuitemcheckbox": frozenset({"menu", "menubar"}),
    "menuitemradio": frozenset({"menu", "menubar"}), "tab": frozenset({"tablist"}),
    "treeitem": frozenset({"tree", "group"}), "radio": frozenset({"radiogroup"}),
    "row": frozenset({"table", "grid", "treegrid", "rowgroup"}),
    "cell": frozenset({"row"}), "gridcell": frozenset({"row"}), "columnheader": frozenset({"row"}),
    "rowheader": frozenset({"row"}),
}
# Composites that hold nothing but their items (and their items nothing interactive): any other
# node closes them. Lists and tables hold arbitrary content in their items.
CLOSED_COMPOSITES = frozenset({"combobox", "listbox", "menu", "menubar", "tablist", "radiogroup", "tree"})
OPEN_COMPOSITES = frozenset({"list", "table", "grid", "treegrid", "rowgroup"})
_CLOSED_ITEMS = frozenset(r for r, ps in ITEM_PARENTS.items() if ps & CLOSED_COMPOSITES)
# Landmarks that hold form controls only (a search box, its scope select, its button): any
# other node (a link, list, table, heading...) is after them.
_SEARCH_CONTENT = frozenset({"searchbox", "textbox", "combobox", "listbox", "option", "button", "StaticText",
                             "generic", "group", "LabelText", "image", "img", "none", "presentation"})
_DIALOGS = frozenset({"dialog", "alertdialog"})
_REGIONS = frozenset({"main", "banner", "contentinfo", "complementary"}) | _DIALOGS
_TABLE_PARTS = frozenset({"table", "grid", "treegrid", "rowgroup", "row", "cell", "gridcell"})
_FRAME_ROLES = frozenset({"RootWebArea", "Iframe"})
# Roles that open a scope for the nodes after them (items do too, see ITEM_PARENTS).
_SCOPE_ROLES = LANDMARK_ROLES | CLOSED_COMPOSITES | OPEN_COMPOSITES | {"heading", "RootWebArea"}
_CONTENT_ROLES = frozenset({"StaticText", "generic", "image", "img", "ListMarker", "LineBreak", "InlineTextBox",
                            "none", "presentation", "LabelText", "Legend", "paragraph", "strong"})
_LETTERS = re.compile(r"[A-Za-z]*")


class StructureTooDeep(ValueError):
    """Inference stopped: a node landed deeper than ``max_depth`` (see :func:`infer_structure`)."""

    def __init__(self, depth: int, max_depth: int):
        super().__init__(f"structure deeper than {max_depth} levels (a node at depth {depth}, inferred from "
                         f"the flat text)")
        self.depth, self.max_depth = depth, max_depth


def infer_structure(tree: AXTree, max_depth: int = 0) -> AXTree:
    """Give a flat tree inferred parents, children and depths, in place (idempotent).

    One pass in document order keeps, per frame, a stack of open scopes (frame root, landmarks,
    headings, composites, items); each node hangs under the innermost scope left open once the
    node has closed the scopes it ends:

    * a landmark closes everything up to the frame root, a dialog, or a page region that holds
      other landmarks (main, banner, contentinfo, complementary, a named region);
    * a heading closes the previous heading's section and the lists in it, not the table cell
      it sits in;
    * an item (listitem, option, menuitem, tab, radio, row, cell...) closes what follows its
      nearest open composite, or the previous item of a run without one;
    * single-purpose composites (combobox, listbox, menu, tablist, radiogroup, tree) hold only
      their items and text, their items only text, a search landmark only form controls, and a
      live region only text: any other node closes them.

    Frames: a RootWebArea after an Iframe is the frame's root; when the bids carry BrowserGym's
    frame prefix (``a35`` inside frame ``a``) a node returns to its own frame's scopes. Indented
    trees are returned unchanged.

    ``max_depth`` (0: none) stops the inference with :class:`StructureTooDeep` as soon as a node
    lands deeper: an item's search for its composite walks the open scopes, so the depth bounds
    the work per node.
    """
    if tree.obs_format != "flat" or tree.inferred:
        return tree
    nodes = tree.nodes
    lettered = any(n.role == "Iframe" and n.bid and n.bid.isalpha() for n in nodes)
    stacks: dict[str, list[int]] = {"": []}
    stack = stacks[""]
    after_iframe: AXNode | None = None
    for n in nodes:
        role = n.role
        if lettered and n.bid and role != "Iframe":
            key = _LETTERS.match(n.bid).group(0)
            if key in stacks and stacks[key] is not stack:
                stack = stacks[key]
        if role == "RootWebArea" and after_iframe is not None:
            _attach(nodes, n, after_iframe.index)
            if max_depth and n.depth > max_depth:
                raise StructureTooDeep(n.depth, max_depth)
            if lettered and after_iframe.bid in stacks:
                stack = stacks[after_iframe.bid]
            stack.append(n.index)
            after_iframe = None
            continue
        after_iframe = None
        _close_scopes(nodes, stack, n)
        if stack:
            _attach(nodes, n, stack[-1])
            if max_depth and n.depth > max_depth:
                raise StructureTooDeep(n.depth, max_depth)
        if role == "Iframe":
            after_iframe = n
            if lettered and n.bid and n.bid.isalpha():
                stacks[n.bid] = []
        elif role in _SCOPE_ROLES or role in ITEM_PARENTS:
            stack.append(n.index)
    tree.inferred = True
    return tree


def _attach(nodes: list[AXNode], node: AXNode, parent: int) -> None:
    node.parent = parent
    node.depth = nodes[parent].depth + 1
    nodes[parent].children.append(node.index)


def _is_section(role: str) -> bool:
    return role in LANDMARK_ROLES or role in _FRAME_ROLES


def _is_live_region(node: AXNode) -> bool:
    """A region that announces status (``live: polite``): it holds text, not the page after it."""
    return node.role == "region" and "live" in node.props


def _close_scopes(nodes: list[AXNode], stack: list[int], node: AXNode) -> None:
    """Pop the scopes that ``node`` ends (see :func:`infer_structure`); a frame root stays."""
    role = node.role
    floor = 1 if stack and nodes[stack[0]].role in _FRAME_ROLES else 0
    while len(stack) > floor:
        top = nodes[stack[-1]]
        if top.role in _CLOSED_ITEMS and role not in _CONTENT_ROLES:
            stack.pop()
        elif top.role in CLOSED_COMPOSITES and not (role in ITEM_PARENTS and top.role in ITEM_PARENTS[role]) \
                and role != "group" and role not in _CONTENT_ROLES:
            stack.pop()
        elif top.role == "search" and role not in _SEARCH_CONTENT:
            stack.pop()
        elif role not in _CONTENT_ROLES and _is_live_region(top):
            stack.pop()
        else:
            break
    if role in ITEM_PARENTS:
        holders = ITEM_PARENTS[role]
        for depth in range(len(stack) - 1, floor - 1, -1):
            r = nodes[stack[depth]].role
            if r in holders:
                del stack[depth + 1:]
                return
            if _is_section(r):
                break
        while len(stack) > floor and nodes[stack[-1]].role == role:   # a run of items without their composite
            stack.pop()
    elif role in LANDMARK_ROLES:
        outer = role in _REGIONS
        while len(stack) > floor:
            top = nodes[stack[-1]]
            if top.role in _FRAME_ROLES or top.role in _DIALOGS or not outer and (
                    top.role in _REGIONS or top.role == "region" and top.name):
                break
            stack.pop()
    elif role == "heading":
        while len(stack) > floor and not _is_section(nodes[stack[-1]].role) \
                and nodes[stack[-1]].role not in _TABLE_PARTS:
            stack.pop()
