"""Scripted solvers for MiniWoB++ tasks (``axtree10`` here, ``rich`` in ``harness.solvers_rich``): one
BrowserGym action for the state a policy sees.

    from harness.solvers import solve_step
    action = solve_step("click-checkboxes", obs.goal, obs.axtree)     # "click('21')", or None

Each solver reads only what a policy reads, the goal text and BrowserGym's flattened AXTree, and
decides from the page as it is now, not from a plan: a checkbox in the wrong state is clicked, a
field whose value differs is filled, and only then is Submit clicked. So a solver can also finish
a task from a state another action left (the replay verifier lets it finish after a negative).
None means it sees nothing to do toward the goal (the page lacks the element the goal names).
"""

from __future__ import annotations

import re
from typing import Callable

from graph.axtree import AXTree, parse_axtree
from harness.solvers_kit import checked, click, elements, fill, login, named, quoted, selection, submit, value
from harness.solvers_rich import RICH

Solver = Callable[[str, AXTree], "str | None"]


# -- one function per task: (goal, parsed AXTree) -> action ----------------------------------------

def click_test(goal: str, tree: AXTree) -> str | None:
    buttons = elements(tree, "button")
    return click(buttons[0]) if buttons else None


def click_button(goal: str, tree: AXTree) -> str | None:
    return click(named(tree, "button", quoted(goal)[0]))


def click_tab(goal: str, tree: AXTree) -> str | None:
    # the link inside the tab: MiniWoB rewards the click on the tab's <a>
    m = re.search(r"Tab #\d+", goal)
    return click(named(tree, "link", m.group(0))) if m else None


def click_dialog(goal: str, tree: AXTree) -> str | None:
    # jQuery UI's title-bar button, shown as "x", named Close
    return click(named(tree, "button", "Close"))


def click_option(goal: str, tree: AXTree) -> str | None:
    radio = named(tree, "radio", selection(goal)[0])
    if radio is None:
        return None
    return submit(tree) if checked(radio) else click(radio)


def click_checkboxes(goal: str, tree: AXTree) -> str | None:
    wanted = set(selection(goal))
    boxes = elements(tree, "checkbox")
    if not wanted <= {b.name for b in boxes}:
        return None
    wrong = next((b for b in boxes if checked(b) != (b.name in wanted)), None)
    return click(wrong) if wrong is not None else submit(tree)


def enter_text(goal: str, tree: AXTree) -> str | None:
    boxes = elements(tree, "textbox")
    if not boxes:
        return None
    word = quoted(goal)[0]
    return fill(boxes[0], word) if value(boxes[0]) != word else submit(tree)


def focus_text(goal: str, tree: AXTree) -> str | None:
    boxes = elements(tree, "textbox")
    return click(boxes[0]) if boxes else None


def login_user(goal: str, tree: AXTree) -> str | None:
    return login(goal, tree, "Login")


def choose_list(goal: str, tree: AXTree) -> str | None:
    m = re.match(r"Select (.*) from the list and click Submit\.?$", goal.strip())
    lists = elements(tree, "combobox", "listbox")
    if m is None or not lists:
        return None
    item = m.group(1)
    if not any(o.name == item for o in elements(tree, "option")):
        return None
    return submit(tree) if value(lists[0]) == item else f"select_option('{lists[0].bid}', {item!r})"


SOLVERS: dict[str, Solver] = {
    "click-test": click_test, "click-button": click_button, "click-tab": click_tab, "click-dialog": click_dialog,
    "click-option": click_option, "click-checkboxes": click_checkboxes, "enter-text": enter_text,
    "focus-text": focus_text, "login-user": login_user, "choose-list": choose_list,
    "click-checkboxes-large": click_checkboxes, "click-checkboxes-transfer": click_checkboxes,
    **RICH,         # the other ``rich`` tasks (harness.solvers_rich)
}


def solve_step(task: str, goal: str, axtree: str) -> str | None:
    """The solver's next BrowserGym action for MiniWoB task ``task`` (``click-button`` or
    ``miniwob.click-button``) in the state ``goal`` and ``axtree`` show; None when it sees nothing
    to do. ``KeyError`` for a task without a solver (``SOLVERS`` lists them)."""
    solver = SOLVERS[task.removeprefix("miniwob.")]
    try:
        return solver(goal, parse_axtree(axtree))
    except (ValueError, IndexError):        # a goal or a page the solver does not recognise
        return None
