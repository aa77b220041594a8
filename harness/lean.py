"""A BrowserGym harness that keeps its browser and observes only the AXTree: for replays, which
reset many times and whose judge reads the AXTree and the task's reward.

    from harness.lean import LeanHarness, vet
    with LeanHarness(MyTask, task_kwargs={...}, allowed_hosts=set(), live_validation=True) as h:
        h.reset(seed=0, observe=False)          # marked, not extracted: obs.axtree == ""
        obs = h.step(vet("click('12')", h))     # the canonical action, or ActionRefused
        reward, info = h.evaluate()

What differs from ``harness.env.BrowserHarness`` (same pages, same bids, same actions):
- BrowserGym launches a new Chromium, context and page at every ``reset``; here only the first
  reset does. Later ones keep the browser, context and page: extra tabs are closed, the page goes
  to ``about:blank`` with its navigation history cleared (so that ``go_back`` after the task's
  first page leads where it led in a new page) and the mouse to (0, 0), then the task sets itself up
  on it (a new document: new JavaScript state, bids marked from scratch). Cookies and storage stay
  with the context: for tasks that keep none (MiniWoB++'s pages keep none). What a reset costs
  then: ``bench/RESULTS.md`` (issue 37).
- BrowserGym extracts a DOM snapshot, a screenshot, the focused element and the element properties
  at every step; here only the elements are marked (their bids: BrowserGym's actions find elements
  by them, so they are marked after every step as BrowserGym does) and, when asked, the AXTree is
  extracted, with the bids Chromium marks clickable when the AXTree has a plain generic node to
  print (``harness.env.flatten_axtree``: the same text as ``BrowserHarness``'s). Actions still run
  through BrowserGym's ``step`` (its action mapping and execution),
  and the task's validator still runs after every step (``live_validation``).
- ``vet``: an action runs only as one call of the run's action set with literal arguments
  (``data.actions.parse_action``), navigation confined to the task's hosts (``refused``), waits
  bounded (``MAX_WAIT_MS``); what runs is the canonical text of that one call.
"""

from __future__ import annotations

import time

from data.actions import ActionParseError, parse_action
from harness.env import BrowserHarness, Observation, StubChat, plain_generics

# noop(wait_ms) waits at most this long; every other BrowserGym action is bounded by Playwright's
# timeouts (500 ms per element action, the task's 5 s for navigation, 3 s per frame's load wait).
MAX_WAIT_MS = 5000

# What BrowserGym reads from a task when it opens the browser context: a task that differs in any of
# them cannot be set up on another task's page (``LeanHarness.retask``). Slow motion and the time-out
# are the harness's own (``_deferred``), the same for every task.
CONTEXT_ATTRIBUTES = ("viewport", "locale", "timezone_id")


class ActionRefused(ValueError):
    """The action may not run in the harness (the message says why)."""


class LeanHarness(BrowserHarness):
    """``BrowserHarness`` resetting on one kept page, with AXTree-only observations (module doc)."""

    _extract = True         # whether the next observation extracts the AXTree

    def _make(self):
        env = super()._make()
        env._get_obs = self._lean_obs       # BrowserGym calls it at the end of reset and step
        env.reset = self._reset
        return env

    def action_set(self) -> set[str]:
        """The ops BrowserGym's action mapping of this harness accepts."""
        from browsergym.core.action.highlevel import HighLevelActionSet

        subsets = self.action_subsets
        return set((HighLevelActionSet(subsets=subsets) if subsets else HighLevelActionSet()).action_set)

    def retask(self, task_entrypoint, task_kwargs: dict | None = None) -> bool:
        """Take another task on this harness's browser, context and page (its next ``reset`` sets
        the new task up in place): True, or False (nothing changed) when the new task asks for a
        browser context of its own (another viewport, locale or time zone, which BrowserGym sets
        when it opens the context): close this harness and open one for it then.
        What a reset in place keeps (cookies and storage) it keeps across tasks too."""
        task_kwargs = dict(task_kwargs or {})
        if self.env is not None and self.env.task is not None:
            probe = task_entrypoint(seed=0, **task_kwargs)      # MiniWoB++'s constructors open nothing
            current = getattr(self.env.task, "inner", self.env.task)
            if any(getattr(probe, a, None) != getattr(current, a, None) for a in CONTEXT_ATTRIBUTES):
                return False
        self.task_entrypoint, self.task_kwargs = task_entrypoint, task_kwargs
        if self.env is not None:
            self.env.task_entrypoint = self._entrypoint()
            self.env.task_kwargs = task_kwargs
        return True

    def reset(self, seed: int = 0, observe: bool = True) -> Observation:
        """``BrowserHarness.reset``, on the same page after the first (module doc); ``observe=False``:
        no AXTree (``axtree`` '')."""
        self._extract = observe
        return super().reset(seed=seed)

    def _reset(self, seed=None, **kwargs) -> tuple[dict, dict]:
        """BrowserGym's ``reset`` the first time (or when no page is left), else the same without a
        new browser, context or page (module doc)."""
        from browsergym.core.env import BrowserEnv

        env = self.env
        if env.task is None or not env.context.pages:
            return BrowserEnv.reset(env, seed=seed, **kwargs)
        env.task.teardown()
        for extra in env.context.pages[1:]:
            extra.close()
        page = env.context.pages[0]
        page.mouse.move(0, 0)
        page.goto("about:blank")
        cdp = env.context.new_cdp_session(page)
        cdp.send("Page.resetNavigationHistory")
        cdp.detach()
        env.page, env.page_history = page, {page: None}
        env.task = env.task_entrypoint(seed=seed, **env.task_kwargs)
        env.chat = StubChat()
        goal, info = env.task.setup(page=page)
        env.goal_object = [] if goal is None else [{"type": "text", "text": goal}] if isinstance(goal, str) else goal
        env.chat.add_message(role="assistant", msg="Hi! I am your UI assistant, I can perform web tasks for you. "
                                                   "What can I help you with?")
        for message in env.goal_object:
            if message["type"] == "text":
                env.chat.add_message(role="user", msg=message["text"])
        env._wait_dom_loaded()
        env._active_page_check()
        env.start_time = time.time()
        env.last_action, env.last_action_error, env.infeasible_message_received = "", "", False
        return env._get_obs(), {"task_info": info}

    def step(self, action: str, observe: bool = True) -> Observation:
        """``BrowserHarness.step``; ``observe=False``: the elements are marked, no AXTree extracted."""
        self._extract = observe
        return super().step(action)

    def _lean_obs(self) -> dict:
        """BrowserGym's observation reduced to what the replay reads: bids marked as its
        ``_get_obs`` marks them, the AXTree when asked (retried as BrowserGym retries)."""
        import playwright.sync_api
        from browsergym.core.env import EXTRACT_OBS_MAX_TRIES, _try_to_extract_legacy_goal
        from browsergym.core.observation import MarkingError, _post_extract, _pre_extract, extract_merged_axtree

        env = self.env
        axtree, clickable = {"nodes": []}, set()
        for left in reversed(range(EXTRACT_OBS_MAX_TRIES)):
            try:
                _pre_extract(env.page, tags_to_mark=env.tags_to_mark, lenient=(left == 0))
                if self._extract:
                    axtree = extract_merged_axtree(env.page)
                    if self.clickable_generics and plain_generics(axtree):
                        clickable = snapshot_clickable(env.page)
            except (playwright.sync_api.Error, MarkingError):
                _post_extract(env.page)
                if left == 0:
                    raise
                continue
            break
        _post_extract(env.page)
        return {"goal": _try_to_extract_legacy_goal(env.goal_object), "url": env.page.url,
                "open_pages_urls": tuple(p.url for p in env.context.pages),
                "active_page_index": [env.context.pages.index(env.page)], "axtree_object": axtree,
                "extra_element_properties": {bid: {"clickable": True} for bid in clickable},
                "focused_element_bid": None, "last_action": env.last_action,
                "last_action_error": env.last_action_error}

    def _observe(self, obs: dict) -> Observation:
        if self._extract:
            return super()._observe(obs)
        self.last_obs, self.last_axtree = obs, ""
        self.observation = Observation(goal=obs["goal"] or "", axtree="", url=obs["url"],
                                       open_urls=list(obs["open_pages_urls"]),
                                       active_tab=int(obs["active_page_index"][0]), last_action=obs["last_action"],
                                       last_action_error=obs["last_action_error"], start_url=self.start_url)
        return self.observation


def snapshot_clickable(page) -> set[str]:
    """The bids of the elements Chromium's DOM snapshot marks ``isClickable`` (what BrowserGym's
    "clickable" element property reads), in every frame; no layout, styles or paint order."""
    from browsergym.core.constants import BROWSERGYM_ID_ATTRIBUTE

    cdp = page.context.new_cdp_session(page)
    try:
        snapshot = cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": []})
    finally:
        cdp.detach()
    strings, out = snapshot["strings"], set()
    if BROWSERGYM_ID_ATTRIBUTE not in strings:
        return out
    bid_name = strings.index(BROWSERGYM_ID_ATTRIBUTE)
    for document in snapshot["documents"]:
        attributes = document["nodes"]["attributes"]
        for i in document["nodes"].get("isClickable", {}).get("index", []):
            names, values = attributes[i][0::2], attributes[i][1::2]
            out.update(strings[v] for n, v in zip(names, values) if n == bid_name)
    return out


def vet(text: str, harness) -> str:
    """The canonical text of ``text`` when it may run in ``harness`` (module doc), else
    ``ActionRefused`` saying why: one call with literal arguments, an op of the harness's action
    set, a ``goto`` inside its hosts, a ``noop`` of at most ``MAX_WAIT_MS``."""
    try:
        action = parse_action(text)
    except ActionParseError as e:
        raise ActionRefused(f"refused: {e}") from None
    if action.op not in harness.action_set():
        raise ActionRefused(f"refused: {action.op} is not in the run's action set")
    if refusal := harness.refused(action):
        raise ActionRefused(refusal)
    if action.op == "noop" and dict(action.args)["wait_ms"] > MAX_WAIT_MS:
        raise ActionRefused(f"refused: noop waits at most {MAX_WAIT_MS} ms")
    return action.to_string()
