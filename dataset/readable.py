"""A pair in words, for every place that shows one (the viewer's list and pair page, the report's
example): each target's role and name beside its bid, icon glyphs as a marker, and the rule's
evidence as one line saying why a⁻ is worse.

Icon fonts draw their glyphs from Unicode's private-use areas (``\\ue603``): no reader knows what
one means, so a run of them shows as ``ICON`` and the element's other labels (its value, its
description or URL, its children's text) say what it is.
"""

from __future__ import annotations

import json
import re

from data.actions import ActionParseError, parse_action
from graph.axtree import AXNode, AXTree
from proposals.audit import element_targets

ICON = "[icon]"
# a run of private-use characters, raw or as the escapes of BrowserGym's ``repr`` of a name
_PRIVATE_USE = re.compile("(?:[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]"
                          r"|\\u[eE][0-9a-fA-F]{3}|\\u[fF][0-8][0-9a-fA-F]{2}|\\U00(?:0[fF]|10)[0-9a-fA-F]{4})+")
_INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e"
                        "\u2060\u2066-\u2069\ufeff]")
_LABEL_PROPS = ("description", "placeholder", "url", "title")
MAX_LABEL = 80


def visible(text: str) -> str:
    """``text`` with the characters that change how the rest reads shown as ``[U+XXXX]``: bidi
    controls (a page's U+202E would show ``click('12')`` reversed, or one name as another),
    zero-width characters and control characters other than tab and newline."""
    return _INVISIBLE.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def mark_icons(text: str) -> str:
    """``text`` with each run of private-use glyphs (raw or escaped) as ``ICON``, and ``visible``."""
    return visible(_PRIVATE_USE.sub(ICON, text))


def readable(text: str | None) -> str:
    """``text`` on one line, each run of private-use glyphs as ``ICON`` (``visible``), at most
    ``MAX_LABEL`` characters."""
    out = " ".join(visible(_PRIVATE_USE.sub(f" {ICON} ", text or "")).split())
    return out if len(out) <= MAX_LABEL else out[:MAX_LABEL - 1] + "…"


def _has_text(text: str) -> bool:
    return bool(text.replace(ICON, "").strip())


def target(tree: AXTree | None, action: str) -> dict | None:
    """The element ``action`` acts on, as ``{"bid", "role", "name", "labels"}`` (``labels``: its
    other labels when its name has no text but icons), or None for a virtual target (no element:
    scroll, goto, go_back, an answer...) and for a bid O_t does not hold."""
    try:
        bids = element_targets(parse_action(action))
    except ActionParseError:
        return None
    node = tree.by_bid().get(bids[0]) if tree is not None and bids else None
    if node is None:
        return None
    name = readable(node.name)
    labels = [] if _has_text(name) else other_labels(tree, node)
    return {"bid": node.bid, "role": node.role, "name": name, "labels": labels}


def other_labels(tree: AXTree, node: AXNode, most: int = 3) -> list[str]:
    """What else names ``node``: its value, its description, placeholder, URL or title, and the
    text of its descendants, in that order, without icons or repeats."""
    props = node.props
    found = [readable(str(node.value)) if node.value not in (None, "") else ""]
    found += [readable(str(props[k])) for k in _LABEL_PROPS if props.get(k)]
    stack = list(reversed(node.children))
    while stack and len(found) < 3 * most:
        child = tree.nodes[stack.pop()]
        found.append(readable(child.name))
        stack.extend(reversed(child.children))
    out = []
    for text in found:
        if _has_text(text) and text not in out:
            out.append(text)
    return out[:most]


def describe(t: dict | None) -> str:
    """A target as one phrase: ``button 'Add to cart'``, ``link '[icon]' (/cart)``, or ``no element``."""
    if t is None:
        return "no element (virtual target)"
    text = f"{t['role']} '{t['name']}'" if t["name"] else t["role"]
    return text + (f" ({'; '.join(t['labels'])})" if t.get("labels") else "")


def _hops(value) -> str:
    return "unreachable" if value is None else f"{value} hops"


def _container(pair) -> str:
    role, name = (list(pair) + ["", ""])[:2] if isinstance(pair, list) else ("", "")
    return f"{readable(str(role))} '{readable(str(name))}'" if name else readable(str(role)) or "the page"


# rule -> how its evidence (``proposals.rules``) says why a⁻ is worse
_WHY = {
    "structurally_near": lambda e: (f"a nearby element: {_hops(e.get('hops'))} from a⁺'s target, inside "
                                    f"{_container(e.get('shared_container'))} (near: ≤ {e.get('near_hops')}), "
                                    "not the demonstrated one"),
    "textually_near_graph_distant": lambda e: (f"a look-alike elsewhere: text {100 * (e.get('ratio') or 0):.0f}% "
                                               f"like a⁺'s target, {_hops(e.get('hops'))} away in the "
                                               f"{e.get('distance', 'graph')} (far: > {e.get('far_hops')})"),
    "repeat_past": lambda e: (f"repeats step {e.get('from_step')}'s {readable(e.get('demonstrated'))}, "
                              f"{e.get('k_back')} step(s) back: already done"),
    "act_too_early": lambda e: (f"takes step {e.get('from_step')}'s {readable(e.get('demonstrated'))} now, "
                                f"{e.get('k_ahead')} step(s) early"),
    "away_from_goal": lambda e: (f"farther from the goal: {_hops(e.get('neg_hops'))} to the task's last element, "
                                 f"a⁺'s target {_hops(e.get('pos_hops'))} ({e.get('distance', 'graph')})"),
    "create_a_cycle": lambda e: (f"a loop: leads back to {readable(str(e.get('returns_to')))}, left "
                                 f"{e.get('loop_steps')} step(s) ago"),
}


def why_worse(rule: str | None, evidence: str | dict | None) -> str:
    """The rule's evidence as one line saying why a⁻ is worse ("" without evidence, e.g. a
    WebPRMBench file's pair); evidence it cannot read is shown as its fields."""
    if isinstance(evidence, str):
        try:
            evidence = json.loads(evidence)
        except ValueError:
            return readable(evidence)
    if not isinstance(evidence, dict) or not evidence:
        return ""
    try:
        line = _WHY[rule](evidence)
    except (KeyError, TypeError, ValueError):
        line = readable(", ".join(f"{k}={v}" for k, v in evidence.items() if k != "also_fired"))
    also = evidence.get("also_fired")
    if isinstance(also, list) and also:
        line += f" (also: {', '.join(map(str, also))})"
    return line
