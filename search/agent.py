"""The BrowserGym-action agent: an LLM policy that proposes N candidate BrowserGym actions on the
AXTree, feedback on its last action, and how the episode loop screens and executes them.

    from search.agent import AXTreeAgent, Policy
    policy = Policy(LLMConfig(base_url="http://gpu:8000/v1", model="gpt-4o", temperature=1.0))
    raws = policy.propose(obs, history=["click('12')"], feedback="navigated to /results", n=5)
    result = search.loop.run_episode(harness, policy.propose, judge_for, agent=AXTreeAgent())

The prompt shows the goal, the URL, the AXTree (cut to ``budget`` characters by
``data.judgment.budget_axtree``; the CLIs' ``--policy-axtree-chars``, default 12,000), the actions
taken so far and textual feedback on the last action. Feedback follows OpenWebRL's idea: compare
the browser state before and after an action and say what happened (``describe_outcome``: navigated or not, new tab, typed value differs
from what was asked, scroll did not move, element not found), so the policy sees failed actions
that BrowserGym reports as success. N samples are one request with the endpoint's ``n`` at
temperature 1.0 (``--prm none`` asks for one greedy sample). Building the prompt and reading the
actions out of the answers are pure functions; only ``Policy.propose`` calls the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from data.actions import ActionParseError, parse_action, split_agent_output
from data.judgment import budget_axtree
from llm import LLMClient, LLMConfig
from search.loop import EpisodeResult, Memory, PolicyError
from search.runner import POLICY_AXTREE_CHARS
from search.tournament import read_actions, screen

SYSTEM = """You are a web agent operating a browser through BrowserGym actions. Each turn you see the \
goal, the current URL, the page's accessibility tree (elements carry ids in brackets, e.g. [12]), \
the actions taken so far and what the last action did. Reply with one short thought, then exactly \
one action in a fenced code block, e.g.
```
click('12')
```
Actions: click(bid), fill(bid, text), select_option(bid, option), press(bid, key_comb), \
hover(bid), check(bid), uncheck(bid), scroll(dx, dy), go_back(), go_forward(), goto(url), \
new_tab(), tab_close(), tab_focus(index), send_msg_to_user(text) to give the final answer \
(or to say the task is done), report_infeasible(reason)."""

AXTREE_BUDGET = POLICY_AXTREE_CHARS       # the policy's AXTree characters unless --policy-axtree-chars


def build_messages(goal: str, axtree: str, url: str, history: list[str], feedback: str = "",
                   budget: int = AXTREE_BUDGET) -> list[dict]:
    """The policy's chat prompt for one step (pure)."""
    tree, _ = budget_axtree(axtree, set(), budget)
    past = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(history)) or "(none yet)"
    user = (f"# Goal\n{goal}\n\n# Current URL\n{url}\n\n# Accessibility tree\n{tree}\n\n"
            f"# Actions so far\n{past}\n\n# What the last action did\n{feedback or '(first step)'}\n\n"
            "Next action?")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


_CALL = re.compile(r"\b[a-z_]+\(.*\)", re.S)


def extract_action(text: str) -> str:
    """The action text of one answer: the last fenced block, else the last line that looks like a
    call; the raw text when neither (the tournament then drops it as unparseable)."""
    try:
        return split_agent_output(text)[1]
    except ActionParseError:
        pass
    for line in reversed((text or "").strip().splitlines()):
        m = _CALL.search(line.strip())
        if m:
            try:
                return parse_action(m.group(0)).to_string()
            except ActionParseError:
                continue
    return (text or "").strip()


class Policy:
    """N candidate actions per step from an LLM through ``llm.client``."""

    def __init__(self, config: LLMConfig, budget: int = AXTREE_BUDGET):
        self.config, self.budget = config, budget
        self.client = LLMClient(config)

    def propose(self, obs, history: list[str], feedback: str, n: int, step: int = 0) -> list[str]:
        """``n`` raw action texts (one greedy answer when ``n == 1`` and temperature is 0)."""
        messages = build_messages(obs.goal, obs.axtree, obs.url, history, feedback, self.budget)
        return [extract_action(t) for t in sample_texts(self.client, messages, n, step, "search.policy")]


def sample_texts(client: LLMClient, messages: list[dict], n: int, step: int, stage: str) -> list[str]:
    """``n`` answers to one prompt in one request; the seed varies with the step so that cached
    N-samples are not the same at every step. An outage raises ``PolicyError``."""
    result = client.chat(messages, stage=stage, n=n, seed=(client.config.seed or 0) + step)
    if not result.ok:
        raise PolicyError(result.infra_error)
    return list(result.texts)


def _node_value(axtree: str, bid: str):
    from graph.axtree import AXTreeParseError, parse_axtree

    try:
        node = parse_axtree(axtree).by_bid().get(bid)
    except AXTreeParseError:
        return None, False
    return (node.value if node else None), node is not None


def describe_outcome(action: str, before, after) -> str:
    """What an action did, from the observations before and after it (pure)."""
    try:
        act = parse_action(action)
    except ActionParseError:
        return f"the action {action!r} could not be parsed"
    notes = []
    err = (after.last_action_error or "").strip()
    if err:
        first = err.splitlines()[0]
        if act.bid is not None and ("Could not find" in err or "not found" in err.lower()
                                    or "bid" in err and "Timeout" in err):
            notes.append(f"element not found: there is no element [{act.bid}] to {act.op} ({first[:160]})")
        else:
            notes.append(f"the action failed: {first[:200]}")
    if len(after.open_urls) > len(before.open_urls):
        notes.append(f"a new tab opened ({len(after.open_urls)} tabs; the active one is {after.active_tab})")
    elif len(after.open_urls) < len(before.open_urls):
        notes.append(f"a tab closed ({len(after.open_urls)} left)")
    if after.url != before.url:
        notes.append(f"navigated from {before.url} to {after.url}")
    elif act.op in ("click", "press", "goto", "go_back", "go_forward", "select_option", "dblclick"):
        notes.append(f"did not navigate (still at {after.url})")
    if act.op == "fill" and not err:
        value, found = _node_value(after.axtree, act.bid)
        if found and value is not None and str(value) != str(act.value):
            notes.append(f"typed value differs: the field shows {str(value)!r}, asked {act.value!r}")
    if act.op in ("scroll", "scroll_at") and tuple(after.scroll) == tuple(before.scroll) and not err:
        notes.append("scroll did not move (already at the edge, or nothing to scroll)")
    return "; ".join(notes) or "done, no visible change of URL or tabs"


@dataclass(slots=True)
class AXTreeStep:
    """One step of a BrowserGym-action episode (a line of ``tasks/<id>.jsonl``)."""

    step: int
    url: str
    candidates: list[str]
    bracket: dict | None
    chosen: str | None
    feedback: str = ""
    error: str = ""
    policy_s: float = 0.0
    judge_s: float = 0.0
    browser_s: float = 0.0
    proposed: int = 0                  # candidates the policy gave (before screening)
    screened_invalid: int = 0          # dropped before the bracket: unparseable, bid not in the AXTree, ...
    screened_duplicate: int = 0        # merged into an earlier candidate
    judge_calls: int = 0
    judge_unparsed: int = 0            # judgments without a valid answer (or an outage)
    judge_truncated: int = 0           # judgments cut at the length limit before an answer


@dataclass(slots=True)
class AXTreeMemory(Memory):
    feedback: str = ""                 # what the last step did, for the policy


ANSWER_OPS = ("send_msg_to_user", "report_infeasible")


class AXTreeAgent:
    """BrowserGym actions on the AXTree (``search.loop.Agent``): the policy sees the goal, URL,
    AXTree, the actions so far and feedback on the last one (``propose(obs, history, feedback,
    n, step)``); candidates are screened against the AXTree's bids; a ``goto`` outside the
    harness's hosts is refused (recorded, not run); ``send_msg_to_user``/``report_infeasible``
    answer."""

    Result = EpisodeResult

    def reset(self, harness, seed: int):
        return harness.reset(seed=seed)

    def memory(self) -> AXTreeMemory:
        return AXTreeMemory()

    def new_step(self, t: int, obs) -> AXTreeStep:
        return AXTreeStep(t, obs.url, [], None, None)

    def propose(self, policy, obs, memory: AXTreeMemory, n: int, t: int) -> list[str]:
        return policy(obs, memory.history, memory.feedback, n, t)

    def screen(self, step: AXTreeStep, outputs: list[str], obs, memory: AXTreeMemory):
        step.candidates = outputs
        return screen(outputs, read_actions(outputs, obs.axtree))

    def no_winner(self, step: AXTreeStep, candidates, memory: AXTreeMemory) -> None:
        step.error = "no valid candidate: " + "; ".join(c.dropped or "" for c in candidates)
        memory.feedback = f"none of your proposed actions was valid ({step.error[:300]})"

    def execute(self, harness, step: AXTreeStep, winner, obs, memory: AXTreeMemory):
        step.chosen = winner.action
        action = parse_action(winner.action)
        refusal = harness.refused(action)
        memory.history.append(winner.action)
        if refusal:
            step.error = memory.feedback = step.feedback = refusal
            return obs, None
        after = harness.step(winner.action)
        step.feedback = memory.feedback = describe_outcome(winner.action, obs, after)
        return after, (str(action.value) if action.op in ANSWER_OPS else None)
