"""The AXTree policy: the goal, the URL, the AXTree, the actions so far and feedback on the last
one in; N candidate BrowserGym actions out, from an LLM through ``llm.client``.

    from harness.policy import Policy
    policy = Policy(LLMConfig(base_url="http://gpu:8000/v1", model="gpt-4o", temperature=1.0))
    raws = policy.propose(obs, history=["click('12')"], feedback="navigated to /results", n=5)

The policy of ``search.agent`` (knockout search, ``search.miniwob``) and of the replay verifier's
policy continuation (``teacher.replay``). Building the prompt and reading the action out of an
answer are pure functions; only ``Policy.propose`` calls the model.
"""

from __future__ import annotations

from data.actions import ActionParseError, extract_action, split_agent_output
from judgment.axtree import budget_axtree
from llm import LLMClient, LLMConfig


class PolicyError(RuntimeError):
    """The policy model gave no answer (an outage, not a format error): ends the episode.
    ``step``: the record of the step it ended (set by the agent)."""

    step = None


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

AXTREE_BUDGET = 12_000      # the policy's AXTree characters (~3k tokens), as the PRM's; --policy-axtree-chars


def build_messages(goal: str, axtree: str, url: str, history: list[str], feedback: str = "",
                   budget: int = AXTREE_BUDGET) -> list[dict]:
    """The policy's chat prompt for one step (pure)."""
    tree, _ = budget_axtree(axtree, set(), budget)
    past = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(history)) or "(none yet)"
    user = (f"# Goal\n{goal}\n\n# Current URL\n{url}\n\n# Accessibility tree\n{tree}\n\n"
            f"# Actions so far\n{past}\n\n# What the last action did\n{feedback or '(first step)'}\n\n"
            "Next action?")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def candidate_text(text: str) -> str:
    """The action text of one answer (``data.actions.extract_action``); when it holds no single
    action, its last fenced block, else the raw text (the tournament then drops it as unparseable,
    with that text shown)."""
    action = extract_action(text)
    if action is not None:
        return action.to_string()
    try:
        return split_agent_output(text)[1]
    except ActionParseError:
        return (text or "").strip()


class Policy:
    """N candidate actions per step from an LLM through ``llm.client``."""

    def __init__(self, config: LLMConfig, budget: int = AXTREE_BUDGET):
        self.config, self.budget = config, budget
        self.client = LLMClient(config)

    def propose(self, obs, history: list[str], feedback: str, n: int, step: int = 0) -> list[str]:
        """``n`` raw action texts (one greedy answer when ``n == 1`` and temperature is 0)."""
        messages = build_messages(obs.goal, obs.axtree, obs.url, history, feedback, self.budget)
        return [candidate_text(t) for t in sample_texts(self.client, messages, n, step, "search.policy")]


def sample_texts(client: LLMClient, messages: list[dict], n: int, step: int, stage: str) -> list[str]:
    """``n`` answers to one prompt in one request; the seed varies with the step so that cached
    N-samples are not the same at every step. An outage raises ``PolicyError``."""
    result = client.chat(messages, stage=stage, n=n, seed=(client.config.seed or 0) + step)
    if not result.ok:
        raise PolicyError(result.infra_error)
    return list(result.texts)
