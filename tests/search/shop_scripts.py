"""The right next step in each state of the demo shop (``search.demo_site``), for scripted
policies and judges: as a BrowserGym action from the AXTree, and as a MAG output from the menu."""

import json
import re

from graph.axtree import parse_axtree
from search.demo_site import GOLD_GUIDES, TASK_ID

GUIDES = GOLD_GUIDES[TASK_ID]


def find(axtree: str, role: str, name: str) -> str:
    for n in parse_axtree(axtree).nodes:
        if n.role == role and n.name == name and n.bid:
            return n.bid
    raise KeyError((role, name))


def right_action(obs) -> str:
    """The correct BrowserGym action for an observation with ``axtree`` and ``url``."""
    tree, path = obs.axtree, obs.url.split("/", 3)[3]
    if path == "":
        box = find(tree, "searchbox", "Search products")
        if parse_axtree(tree).by_bid()[box].value != "kettle":
            return f"fill('{box}', 'kettle')"
        return f"click('{find(tree, 'button', 'Search')}')"
    if path.startswith("search"):
        return f"click('{find(tree, 'link', 'Blue Kettle')}')"
    if path.startswith("item/"):
        return f"click('{find(tree, 'link', 'Order this item')}')"
    if path.startswith("order"):
        nodes = parse_axtree(tree).by_bid()
        name = find(tree, "textbox", "Name")
        if nodes[name].value != "Ada":
            return f"fill('{name}', 'Ada')"
        qty = find(tree, "combobox", "Quantity")
        if nodes[qty].value != "2":
            return f"select_option('{qty}', '2')"
        return f"click('{find(tree, 'button', 'Place order')}')"
    if path.startswith("done"):
        number = next(n.name for n in parse_axtree(tree).nodes if n.name.startswith("Order number"))
        return f"send_msg_to_user('Your order number is {number.split()[-1]}')"
    raise AssertionError(obs.url)


# A policy prompt template (``--policy-prompt-template``) that also gives the URL, so that a
# scripted policy can tell the shop's pages apart (the default prompt has no URL, as in MAG).
URL_TEMPLATE = """system: You write one JSON step with the keys think, action_type, selected_candidate_id, content,
  guide_text.
user: |
  {task}
  <<<BEGIN URL>>>
  {url}
  <<<END URL>>>
  <<<BEGIN MENU>>>
  {menu}
  <<<END MENU>>>
"""


def mag_output(verb, target, content, guide) -> str:
    return json.dumps({"think": "The next step of the order.", "action_type": verb, "selected_candidate_id": target,
                       "content": content, "guide_text": guide})


def menu_of_prompt(prompt: str) -> list[tuple[int, str, str]]:
    """(id, TYPE, text) of the menu lines in a MAG policy prompt."""
    menu = re.search(r"<<<BEGIN MENU>>>\n(.*?)\n<<<END MENU>>>", prompt, re.S).group(1)
    return [(int(i), k, text) for i, k, text in re.findall(r"^\[(\d+)\] (\S+) (.*)$", menu, re.M)]


def menu_id(menu, kind: str, label: str) -> int:
    return next(i for i, k, text in menu if k == kind and (text == label or text.startswith(label + " =")))


def right_output(url: str, menu) -> str:
    """The correct MAG output (with the gold guide) for a page at ``url`` with ``menu`` entries."""
    text = {i: t for i, _, t in menu}
    path = url.split("/", 3)[3]
    if path == "":
        box = menu_id(menu, "INPUT", "Search products")
        if "kettle" not in text[box]:
            return mag_output("type", box, "kettle", GUIDES[0])
        return mag_output("press_enter", box, None, GUIDES[1])
    if path.startswith("search"):
        return mag_output("click", menu_id(menu, "LINK", "Blue Kettle"), None, GUIDES[2])
    if path.startswith("item/"):
        return mag_output("click", menu_id(menu, "LINK", "Order this item"), None, GUIDES[3])
    if path.startswith("order"):
        name, qty = menu_id(menu, "INPUT", "Name"), menu_id(menu, "SELECT", "Quantity")
        if "Ada" not in text[name]:
            return mag_output("type", name, "Ada", GUIDES[4])
        if '"2"' not in text[qty]:
            return mag_output("select", qty, "2", GUIDES[5])
        return mag_output("click", menu_id(menu, "BUTTON", "Place order"), None, GUIDES[6])
    if path.startswith("done"):
        return mag_output("finish", None, f"Your order number is {url.split('n=')[1]}", GUIDES[7])
    raise AssertionError(url)


def right_output_for(obs) -> str:
    """``right_output`` for a ``search.mag.som.SomObservation``."""
    return right_output(obs.url, [(m.id, m.type, m.text) for m in obs.marks])
