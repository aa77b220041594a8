"""Scripted OpenAI-protocol policies for two MiniWoB++ tasks, read from the policy's real prompt
(goal, BrowserGym's AXTree, the actions so far): ``click-button`` (click the button the goal names)
and ``enter-text`` (fill the word the goal names, then click Submit). ``right`` solves them, ``wrong``
clicks another button / types another word."""

import re


def section(prompt: str, name: str) -> str:
    return re.search(rf"# {name}\n(.*?)(?:\n\n# |\Z)", prompt, re.S).group(1)


def bid(axtree: str, role: str, name: str | None = None) -> str:
    """The bid of the first ``role`` element (named ``name``), from the flattened AXTree."""
    label = re.escape(name) if name is not None else "[^']*"
    pattern = rf"\[(\w+)\] {role} '{label}'"
    return re.search(pattern, axtree).group(1)


def quoted(goal: str) -> str:
    return re.search(r'"([^"]+)"', goal).group(1)


def actions(prompt: str) -> dict[str, str]:
    """The right and the wrong action for the state a policy prompt shows."""
    goal, tree = section(prompt, "Goal"), section(prompt, "Accessibility tree")
    history = section(prompt, "Actions so far")
    word = quoted(goal)
    if goal.startswith("Click on the"):                         # click-button
        right = bid(tree, "button", word)
        others = [b for b in re.findall(r"\[(\w+)\] button", tree) if b != right] or \
            [b for b in re.findall(r"\[(\w+)\]", tree) if b != right]     # a seed may draw one button
        return {"right": f"click('{right}')", "wrong": f"click('{others[0]}')"}
    if goal.startswith("Enter"):                                 # enter-text
        if "fill(" not in history:
            box = bid(tree, "textbox")
            return {"right": f"fill('{box}', '{word}')", "wrong": f"fill('{box}', '{word}zz')"}
        submit = f"click('{bid(tree, 'button', 'Submit')}')"
        return {"right": submit, "wrong": submit}
    raise AssertionError(f"no script for the goal {goal!r}")


def policy(kind: str):
    """A scripted server's ``answer``: one fenced ``kind`` action per requested sample."""
    def answer(payload):
        action = actions(payload["messages"][-1]["content"])[kind]
        return [f"Thought.\n```\n{action}\n```"] * payload.get("n", 1)
    return answer
