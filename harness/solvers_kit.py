"""What the scripted MiniWoB++ solvers share: reading a goal and BrowserGym's flattened AXTree,
writing one BrowserGym action (``harness.solvers`` and ``harness.solvers_rich`` use them).
"""

from __future__ import annotations

import re

from graph.axtree import AXNode, AXTree


def quoted(goal: str) -> list[str]:
    """The double-quoted strings of a goal, in order."""
    return re.findall(r'"([^"]*)"', goal)


def selection(goal: str) -> list[str]:
    """``Select A, B and click Submit.`` -> ['A', 'B']; ``Select nothing ...`` -> []."""
    m = re.match(r"Select (.*) and click Submit\.?$", goal.strip())
    if m is None:
        raise ValueError(f"not a selection goal: {goal!r}")
    what = m.group(1).strip()
    return [] if what == "nothing" else [s.strip() for s in what.split(",")]


def elements(tree: AXTree, *roles: str) -> list[AXNode]:
    return [n for n in tree.nodes if n.bid is not None and n.role in roles]


def clickables(tree: AXTree) -> list[AXNode]:
    """The plain divs and spans with a click handler (``[bid] generic, clickable=True``:
    ``harness.env.flatten_axtree``)."""
    return [n for n in elements(tree, "generic") if n.props.get("clickable") is True]


def subtree(tree: AXTree, node: AXNode) -> list[AXNode]:
    """The nodes printed under ``node`` (deeper lines right after it), in document order."""
    out = []
    for n in tree.nodes[node.index + 1:]:
        if n.depth <= node.depth:
            break
        out.append(n)
    return out


def first_text(tree: AXTree, node: AXNode) -> str:
    """The first text under ``node`` ('' when none)."""
    return next((n.name for n in subtree(tree, node) if n.role == "StaticText"), "")


def named(tree: AXTree, role: str, name: str) -> AXNode | None:
    return next((n for n in elements(tree, role) if n.name == name), None)


def checked(node: AXNode) -> bool:
    return str(node.props.get("checked", "false")).lower() == "true"


def click(node: AXNode | None) -> str | None:
    return None if node is None else f"click('{node.bid}')"


def fill(node: AXNode, text: str) -> str:
    return f"fill('{node.bid}', {text!r})"


def value(node: AXNode) -> str:
    return "" if node.value is None else str(node.value)


def holds(node: AXNode, text: str) -> bool:
    """The field shows ``text``; a password field shows one bullet per character, which is all a
    policy can see of it."""
    shown = value(node)
    return shown == text or (bool(text) and shown == "\u2022" * len(text))


def submit(tree: AXTree, name: str = "Submit") -> str | None:
    return click(named(tree, "button", name))


def labelled_textboxes(tree: AXTree) -> dict[str, AXNode]:
    """Each textbox under the label text that comes last before it (``Username``, ``Password``)."""
    out, label = {}, None
    for n in tree.nodes:
        if n.role == "StaticText" and n.name.strip():
            label = n.name.strip().lower()
        elif n.role == "textbox" and n.bid is not None and label is not None:
            out.setdefault(label, n)
    return out


def login(goal: str, tree: AXTree, button: str) -> str | None:
    """Fill the username and password the goal quotes where they differ, then click ``button``."""
    user, password = quoted(goal)[:2]
    boxes = labelled_textboxes(tree)
    if "username" not in boxes or "password" not in boxes:
        return None
    for box, text in ((boxes["username"], user), (boxes["password"], password)):
        if not holds(box, text):
            return fill(box, text)
    return submit(tree, button)
