"""The observation model: parse AXTree text into nodes.

Two text forms are read:

* ``indented``: BrowserGym's ``flatten_axtree_to_str`` output (AgentLab). Depth is the number
  of leading tabs; a node is ``[bid] role 'name' value='v', prop='x', flag``. Names and
  property values are Python ``repr`` literals (single or double quotes, escapes such as
  ``\\uf132``); unnamed ``generic`` nodes print the role alone; nodes without a bid have no
  ``[...]`` prefix.
* ``flat``: the WebArena / WebPRM Collection form: no indentation, ``[bid] role 'name'
  prop: value prop: value``, after a ``Tab N (current): title`` header.

Nothing here knows about graphs; :mod:`graph.identity` builds element identities on top.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_STR = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
_STR_RE = re.compile(_STR)
_HEAD = re.compile(r"^(?:\[(?P<bid>[^\]\s]*)\]\s+)?(?P<role>[A-Za-z][\w-]*)")
_TAB = re.compile(r"^Tab (?P<index>\d+)(?P<current> \(current\))?:\s?(?P<title>.*)$")
_PROP = re.compile(r"\s*,\s*(?P<key>[A-Za-z_][\w-]*)(?:=(?P<val>" + _STR + r"|[^,]*))?")
_FLAT_KEY = re.compile(r"(?:^|\s)(?P<key>[A-Za-z_][\w-]*): ")


@dataclass(slots=True)
class AXNode:
    """One line of an AXTree: an accessibility node."""

    index: int                    # position in the text (document order)
    bid: str | None               # BrowserGym element id, None for nodes without one
    role: str
    name: str
    depth: int
    value: object = None
    props: dict = field(default_factory=dict)
    parent: int | None = None     # index of the parent node (None at the root or in flat trees)
    children: list[int] = field(default_factory=list)


@dataclass(slots=True)
class AXTree:
    nodes: list[AXNode]
    obs_format: str
    tabs: list[dict] = field(default_factory=list)       # ``Tab N (current): title`` headers
    unparsed: list[str] = field(default_factory=list)    # lines that are not nodes

    def by_bid(self) -> dict[str, AXNode]:
        """bid -> node (the first one when a bid repeats; see :meth:`duplicate_bids`)."""
        out: dict[str, AXNode] = {}
        for n in self.nodes:
            if n.bid is not None and n.bid not in out:
                out[n.bid] = n
        return out

    def duplicate_bids(self) -> list[str]:
        seen, dups = set(), []
        for n in self.nodes:
            if n.bid is not None:
                if n.bid in seen and n.bid not in dups:
                    dups.append(n.bid)
                seen.add(n.bid)
        return dups

    def ancestors(self, node: AXNode) -> list[AXNode]:
        """Parent first, root last."""
        out, i = [], node.parent
        while i is not None:
            out.append(self.nodes[i])
            i = self.nodes[i].parent
        return out


class AXTreeParseError(ValueError):
    """The text holds no AXTree node at all."""


def _literal(text: str):
    text = text.strip()
    if not text:
        return ""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _take_string(rest: str) -> tuple[str | None, str]:
    """A leading Python string literal of ``rest`` (decoded) and what follows it."""
    m = _STR_RE.match(rest)
    if not m:
        return None, rest
    return _literal(m.group(0)), rest[m.end():]


def parse_line(line: str) -> tuple[dict | None, str | None]:
    """(fields, None) for a node line, (None, reason) otherwise. Fields carry no depth."""
    m = _HEAD.match(line)
    if not m:
        return None, "not a node line"
    bid, role = m.group("bid"), m.group("role")
    rest = line[m.end():]
    name = ""
    if rest.startswith(" "):
        s, after = _take_string(rest[1:])
        if s is not None:
            name, rest = str(s), after
    value = None
    props: dict = {}
    if rest.startswith(" value="):
        v, after = _take_string(rest[len(" value="):])
        if v is None:
            tok = re.match(r"[^,]*", rest[len(" value="):]).group(0)
            v, after = _literal(tok), rest[len(" value=") + len(tok):]
        value, rest = v, after
    if rest.startswith(","):
        pos = 0
        while pos < len(rest):
            pm = _PROP.match(rest, pos)
            if not pm or pm.end() == pos:
                return None, f"cannot read properties at {rest[pos:pos + 30]!r}"
            val = pm.group("val")
            props[pm.group("key")] = True if val is None else _literal(val)
            pos = pm.end()
    elif rest.strip():
        # flat form: " key: value key: value"
        keys = list(_FLAT_KEY.finditer(rest))
        if not keys or rest[: keys[0].start()].strip():
            return None, f"unexpected text after name: {rest[:40]!r}"
        for k, nxt in zip(keys, keys[1:] + [None]):
            raw = rest[k.end(): nxt.start() if nxt else len(rest)].strip()
            v = _literal(raw) if raw in ("True", "False", "None") or re.fullmatch(r"-?\d+(\.\d+)?", raw) else raw
            props[k.group("key")] = v
    return {"bid": bid if bid else None, "role": role, "name": name, "value": value, "props": props}, None


def parse_axtree(text: str, obs_format: str | None = None) -> AXTree:
    """Parse AXTree text. ``obs_format`` is detected when not given (tabs => indented)."""
    lines = (text or "").split("\n")
    if obs_format is None:
        obs_format = "indented" if any(l.startswith("\t") for l in lines) else "flat"
    tree = AXTree(nodes=[], obs_format=obs_format)
    stack: list[AXNode] = []   # ancestors of the current line, for indented trees
    for raw in lines:
        if not raw.strip():
            continue
        stripped = raw.lstrip("\t")
        depth = len(raw) - len(stripped) if obs_format == "indented" else 0
        tab = _TAB.match(stripped.rstrip())
        if tab and depth == 0:
            tree.tabs.append({"index": int(tab.group("index")), "current": bool(tab.group("current")),
                              "title": tab.group("title")})
            continue
        fields_, why = parse_line(stripped.rstrip("\r"))
        if fields_ is None:
            tree.unparsed.append(raw)
            continue
        node = AXNode(index=len(tree.nodes), depth=depth, **fields_)
        if obs_format == "indented":
            while stack and stack[-1].depth >= depth:
                stack.pop()
            if stack:
                node.parent = stack[-1].index
                stack[-1].children.append(node.index)
            stack.append(node)
        tree.nodes.append(node)
    if not tree.nodes:
        raise AXTreeParseError("no AXTree node found" + (f"; first line: {lines[0][:60]!r}" if lines else ""))
    return tree
