"""A BrowserGym harness on Debian's chromium: observations as text, deferred evaluation, confined navigation.

    from harness.env import BrowserHarness
    with BrowserHarness(MyTask, task_kwargs={...}, allowed_hosts={"127.0.0.1:8000"}) as h:
        obs = h.reset(seed=0)
        obs = h.step("click('12')")         # obs.last_action_error: what the browser refused
        reward, info = h.evaluate()

Why the wrapping (a machine that cannot download Playwright's browser builds, as in CI):
- BrowserGym launches Playwright's own chromium build, which cannot be downloaded here: the page
  browser gets ``executable_path`` (Debian's chromium) and the "chat" window, a second browser
  used only to show messages, is replaced by an in-memory stub (~170 MB and ~1 s per reset).
- BrowserGym validates the task after every step; WebArena's validators may then navigate or
  score an unfinished episode. The task is wrapped so that ``validate`` is a no-op during the
  episode and the real validator runs once, in ``evaluate()``, at the end.
- WebArena tasks ask for ``slow_mo=1000``; we run with ``slow_mo=0`` and a short observation delay.
- ``goto`` outside the configured hosts is refused before it reaches the browser (an empty set
  of hosts refuses every ``goto``: MiniWoB's pages are local files).
- ``live_validation=True`` is for tasks whose validator only reads the page (MiniWoB): it then
  runs after every step, as BrowserGym intends: ``task_done`` says when the task ended the
  episode itself (MiniWoB ends it at the first submit, right or wrong) and ``reward`` is the
  validator's reward after the last step.
- Playwright 1.44 (BrowserGym's pin) records the caller's stack with ``inspect.stack()`` and
  ``traceback.extract_stack()`` on every API call; ``inspect.stack()`` reads source context and
  resolves each frame's module through ``inspect.getmodule``, which scans ``sys.modules`` (thousands
  of entries once torch is imported). That was two thirds of a MiniWoB episode's time under pytest
  (36 of 54 s). ``lighten_playwright_stacks`` gives Playwright the same frames without the source
  lookups (what later Playwright releases do themselves, playwright-python #2835, #3147).
- OpenWebRL's robustness (App. A.1, ``harness.robust.Robustness``): the start page is retried with
  backoff; start-up, actions and screenshots have their own time-outs; a host
  blocklist beside the allow-list; one record per infrastructure failure in ``diagnostics``. The
  element probes of its feedback (A.2): ``element_under`` and ``focused_element``
  (``element_probes``: on by default).
- A plain ``div`` or ``span`` with a click handler (a ``generic`` AXTree node without properties,
  which BrowserGym's ``flatten_axtree_to_str`` skips, bid and all) is printed with its bid and
  ``clickable=True`` (``flatten_axtree``; Chromium's ``isClickable``, BrowserGym's "clickable"
  element property), so that a policy can name the control (multi-orderings' "Submit" div, an
  inbox's email line, a link word among words). Every other line prints as BrowserGym prints it;
  the lines under such a node move one tab right. ``teacher.replay.normalize_axtree`` takes these
  lines out again (observations recorded before them replay as equal). ``clickable_generics=False``:
  BrowserGym's text as it is.
- ``start_url`` is the task's own start URL (``task_start_url``: a WebArena config's
  ``start_url`` as BrowserGym resolved it, or the task's ``start_url`` attribute), which the PRM's
  prompt shows; only a task that declares none falls back to the first page observed.
Everything here is synchronous Playwright: never call it from inside an asyncio loop.
Nothing is imported from BrowserGym at module import.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from harness.robust import (
    SCREENSHOT_MS,
    Robustness,
    ScreenshotError,
    add_to_blocklist,
    block_hosts,
    diagnostic,
    element_under,
    focused_element,
    install_timed_screenshots,
    read_blocklist,
    transient,
)


class _Stacks:
    """``inspect`` and ``traceback`` as Playwright's modules see them, with cheap stack captures:
    the same frames, file names, line numbers and functions (all Playwright reads of them), no
    source context and no module lookup; lines of a captured traceback are read only if shown."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)

    @staticmethod
    def stack(context: int = 1):
        import inspect

        frames, f = [], sys._getframe(1)
        while f is not None:
            frames.append(inspect.FrameInfo(f, f.f_code.co_filename, f.f_lineno, f.f_code.co_name, None, None))
            f = f.f_back
        return frames

    @staticmethod
    def extract_stack(f=None, limit=None):
        import traceback

        summary = traceback.StackSummary.extract(traceback.walk_stack(f or sys._getframe(1)), limit=limit,
                                                 lookup_lines=False)
        summary.reverse()
        return summary


def lighten_playwright_stacks() -> bool:
    """Point Playwright's per-call stack captures at ``_Stacks`` (see module docstring); idempotent.
    Only for the Playwright versions whose modules read ``inspect.stack``/``traceback.extract_stack``
    per call; False (nothing changed) when the modules do not look as expected."""
    import importlib
    import inspect
    import traceback

    try:
        mods = [importlib.import_module(f"playwright._impl.{m}") for m in ("_connection", "_sync_base", "_network")]
    except ImportError:
        return False
    if not all(isinstance(getattr(m, "inspect", None), (type(inspect), _Stacks)) for m in mods):
        return False
    for m in mods:
        if not isinstance(m.inspect, _Stacks):
            m.inspect = _Stacks(inspect)
    sync_base = mods[1]
    if isinstance(getattr(sync_base, "traceback", None), type(traceback)):
        sync_base.traceback = _Stacks(traceback)
    return True


def _stop_global_playwright() -> None:
    """BrowserGym keeps one sync Playwright per process and never stops it; its event loop then
    stays bound to this thread, and any later ``asyncio.run`` (the LLM client) fails with
    'cannot be called from a running event loop'. Stop it with the harness."""
    import browsergym.core as bgc

    pw = getattr(bgc, "_PLAYWRIGHT", None)
    if pw is not None:
        try:
            pw.stop()
        finally:
            bgc._set_global_playwright(None)


CHROMIUM = Path("/usr/lib/chromium/chromium")   # Debian's real binary (/usr/bin/chromium is a wrapper)
CACHE = Path(".cache")
NLTK_PUNKT_FILES = ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab")


class SiteUnreachable(RuntimeError):
    """The start page did not load (connection refused, DNS, chrome error page, a blocked host)."""


def prepare_nltk_stub(cache: Path = CACHE) -> Path:
    """Empty ``punkt_tab`` files so that ``import browsergym.webarena*`` does not try to download
    them (it only needs them to exist); sets ``NLTK_DATA``, and ``nltk.data.path`` when NLTK is
    already imported (it reads ``NLTK_DATA`` once, at import: e.g. after MAG's BLEU). Returns
    the folder."""
    root = (cache / "nltk_data").resolve()
    d = root / "tokenizers" / "punkt_tab" / "english"
    d.mkdir(parents=True, exist_ok=True)
    for name in NLTK_PUNKT_FILES:
        (d / name).touch()
    paths = os.environ.get("NLTK_DATA", "")
    if str(root) not in paths.split(os.pathsep):
        os.environ["NLTK_DATA"] = os.pathsep.join(p for p in (str(root), paths) if p)
    if (nltk_data := sys.modules.get("nltk.data")) is not None and str(root) not in nltk_data.path:
        nltk_data.path.insert(0, str(root))
    return root


def prepare_webarena_imports(cache: Path = CACHE) -> None:
    """Make ``browsergym.webarena*`` importable offline: the NLTK stub, and a stand-in for
    ``text_generation`` (libwebarena imports its ``Client`` for a Hugging Face TGI provider that
    no evaluator used here calls; the package is left out of the install because it caps
    huggingface-hub < 1, see requirements/browsergym.txt)."""
    import importlib.util
    import types

    prepare_nltk_stub(cache)
    if "text_generation" not in sys.modules and importlib.util.find_spec("text_generation") is None:
        stub = types.ModuleType("text_generation")

        class Client:       # raises only if someone really asks TGI for a completion
            def __init__(self, *args, **kwargs):
                raise RuntimeError("text_generation is not installed (pip install text-generation)")

        stub.Client = Client
        sys.modules["text_generation"] = stub


def host_of(url: str) -> str:
    """``host[:port]`` lower-cased (what navigation confinement compares)."""
    return urlsplit(url).netloc.lower()


class StubChat:
    """Stands in for BrowserGym's chat window: keeps the messages, opens no browser."""

    def __init__(self, *args, **kwargs):
        self.messages: list[dict] = []
        self.recording_start_time = None
        self.page = None

    def add_message(self, role: str, msg: str):
        if role not in ("user", "user_image", "assistant", "info", "infeasible"):
            raise ValueError(f"Invalid role: {role}")
        if role != "info":
            self.messages.append({"role": role, "timestamp": time.time(), "message": msg})

    def wait_for_user_message(self):
        raise RuntimeError("the search harness never waits for a user message")

    def close(self):
        pass


def _deferred(task_entrypoint, slow_mo: int, timeout: int | None, live_validation: bool = False, prepare=None):
    """A task entrypoint whose tasks validate only when ``evaluate`` asks, or after every step
    with ``live_validation`` (see module docstring); ``prepare(page)`` runs before the task's own
    set-up (its first navigation)."""
    from browsergym.core.task import AbstractBrowserTask

    class DeferredTask(AbstractBrowserTask):
        @classmethod
        def get_task_id(cls):
            return task_entrypoint.get_task_id() if hasattr(task_entrypoint, "get_task_id") else "custom"

        def __init__(self, seed: int, **kwargs):
            self.inner = task_entrypoint(seed=seed, **kwargs)
            self.viewport, self.locale = self.inner.viewport, self.inner.locale
            self.timezone_id = self.inner.timezone_id
            self.slow_mo = slow_mo
            self.timeout = timeout if timeout is not None else self.inner.timeout

        def setup(self, page):
            if prepare is not None:
                prepare(page)
            return self.inner.setup(page)

        def validate(self, page, chat_messages):
            if live_validation:
                return self.inner.validate(page, chat_messages)
            return 0.0, False, "", {}

        def teardown(self):
            self.inner.teardown()

    return DeferredTask


CLICKABLE = "clickable"      # the property a clickable generic node is printed with (``flatten_axtree``)
ALWAYS_SHOWN = ("required", "focused", "atomic")       # BrowserGym prints these properties only when true


def plain_generics(axtree: dict) -> list[dict]:
    """The ``generic`` nodes with a bid that BrowserGym's ``flatten_axtree_to_str`` skips: a name
    but no property it prints (a plain div or span)."""
    from browsergym.utils.obs import IGNORED_AXTREE_PROPERTIES

    def printed(p: dict) -> bool:
        value = p.get("value")
        return (isinstance(value, dict) and "value" in value and p["name"] not in IGNORED_AXTREE_PROPERTIES
                and (p["name"] not in ALWAYS_SHOWN or bool(value["value"])))

    return [n for n in axtree["nodes"] if n["role"]["value"] == "generic" and n.get("browsergym_id")
            and "name" in n and not any(printed(p) for p in n.get("properties", []))]


def flatten_axtree(axtree: dict, clickable=frozenset()) -> str:
    """BrowserGym's ``flatten_axtree_to_str``, with each plain generic node (``plain_generics``)
    whose bid is in ``clickable`` printed as ``[bid] generic, clickable=True`` (module docstring)."""
    from browsergym.utils.obs import flatten_axtree_to_str

    marked = {id(n) for n in plain_generics(axtree) if n["browsergym_id"] in clickable} if clickable else set()
    if marked:
        flag = {"name": CLICKABLE, "value": {"type": "boolean", "value": True}}
        axtree = {**axtree, "nodes": [{**n, "properties": [*n.get("properties", []), flag]} if id(n) in marked else n
                                      for n in axtree["nodes"]]}
    return flatten_axtree_to_str(axtree)


def clickable_bids(obs: dict) -> set[str]:
    """The bids BrowserGym's element properties mark clickable (Chromium's ``isClickable``: a
    click listener, a link)."""
    return {bid for bid, p in (obs.get("extra_element_properties") or {}).items() if p.get("clickable")}


@dataclass(slots=True)
class Observation:
    """What the policy, the judge and the feedback see of the browser after a step."""

    goal: str
    axtree: str
    url: str
    open_urls: list[str] = field(default_factory=list)
    active_tab: int = 0
    last_action: str = ""
    last_action_error: str = ""
    scroll: tuple[float, float] = (0.0, 0.0)
    focused_bid: str | None = None
    start_url: str = ""           # the task's start URL (see ``task_start_url``)


def task_start_url(task) -> str | None:
    """The start URL a task declares: ``config["start_url"]`` of a WebArena(-Lite) task after
    setup (placeholders resolved by BrowserGym; several start pages stay joined by WebArena's
    `` |AND| ``), else a ``start_url`` attribute; None when it declares none."""
    config = getattr(task, "config", None)
    if isinstance(config, dict) and config.get("start_url"):
        return str(config["start_url"])
    url = getattr(task, "start_url", None)
    return str(url) if isinstance(url, str) and url else None


class BrowserHarness:
    """One BrowserGym environment around one task (see module docstring)."""

    def __init__(self, task_entrypoint, task_kwargs: dict | None = None, allowed_hosts=None,
                 headless: bool = True, timeout_ms: int = 5000, pre_observation_delay: float = 0.1,
                 chromium: Path | None = None, viewport: dict | None = None,
                 action_subsets: list[str] | None = None, live_validation: bool = False,
                 robustness: Robustness | None = None, element_probes: bool = True,
                 clickable_generics: bool = True):
        self.task_entrypoint, self.task_kwargs = task_entrypoint, dict(task_kwargs or {})
        self.allowed_hosts = {h.lower() for h in allowed_hosts} if allowed_hosts is not None else None
        self.headless, self.timeout_ms = headless, timeout_ms
        # SURFPRM_CHROMIUM points at another binary; read when a harness is built, not at import.
        chromium = chromium or os.environ.get("SURFPRM_CHROMIUM") or CHROMIUM
        self.pre_observation_delay, self.chromium, self.viewport = pre_observation_delay, Path(chromium), viewport
        self.action_subsets = action_subsets     # BrowserGym's high-level subsets (None: its default)
        self.live_validation = live_validation
        self.task_done = False      # the task ended the episode (``live_validation`` only)
        self.reward = 0.0           # the task's reward after the last step (``live_validation`` only)
        self.observation: Observation | None = None     # the last one (reset or step)
        self.env = None
        self.last_obs: dict | None = None        # BrowserGym's raw observation of the last reset/step
        self.last_axtree = ""
        self.start_url = ""         # the task's start URL, known after reset (``task_start_url``)
        self.browser_s = 0.0        # time spent in the browser (reset, steps, evaluation)
        # A.1 (harness.robust): ``timeout_ms`` is the action time-out unless ``robustness`` names one
        self.robustness = (robustness or Robustness(action_s=timeout_ms / 1000)).check()
        self.diagnostics: list[dict] = []       # one record per infrastructure failure
        self.element_probes = element_probes    # A.2: element_under / focused_element answer
        self.clickable_generics = clickable_generics    # print plain clickable divs/spans (flatten_axtree)

    def _make(self):
        import browsergym.core.env as bg_env
        from browsergym.core.env import BrowserEnv

        if not self.chromium.exists():
            raise FileNotFoundError(f"chromium not found at {self.chromium} (apt-get install chromium)")
        bg_env.Chat = StubChat      # BrowserEnv.reset builds its chat window from this name
        lighten_playwright_stacks()
        install_timed_screenshots()
        extra = {}
        if self.action_subsets:
            from browsergym.core.action.highlevel import HighLevelActionSet

            extra["action_mapping"] = HighLevelActionSet(subsets=self.action_subsets).to_python_code
        return BrowserEnv(**extra, task_entrypoint=self._entrypoint(), task_kwargs=self.task_kwargs,
                          headless=self.headless, viewport=self.viewport,
                          pre_observation_delay=self.pre_observation_delay,
                          pw_chromium_kwargs={"executable_path": str(self.chromium)})

    def _entrypoint(self):
        """The task entrypoint BrowserGym is given: this harness's task, validated as it asks
        (``_deferred``), set up after ``_prepare``, with the start-up time-out."""
        return _deferred(self.task_entrypoint, 0, int(self.robustness.startup_s * 1000), self.live_validation,
                         self._prepare)

    def _observe(self, obs: dict) -> Observation:
        try:
            scroll = tuple(self.env.page.evaluate("[window.scrollX, window.scrollY]"))
        except Exception:       # a page mid-navigation has no scroll position to read
            scroll = (0.0, 0.0)
        clickable = clickable_bids(obs) if self.clickable_generics else ()
        self.last_obs, self.last_axtree = obs, flatten_axtree(obs["axtree_object"], clickable)
        self.observation = Observation(goal=obs.get("goal") or "", axtree=self.last_axtree,
                                       url=obs["url"], open_urls=list(obs["open_pages_urls"]),
                                       active_tab=int(obs["active_page_index"][0]), last_action=obs["last_action"],
                                       last_action_error=obs["last_action_error"], scroll=scroll,
                                       focused_bid=obs.get("focused_element_bid") or None, start_url=self.start_url)
        return self.observation

    def _prepare(self, page) -> None:
        """Before the task's first navigation: the blocklist's routes and the screenshot time-out."""
        block_hosts(page.context, read_blocklist(self.robustness.blocklist))
        setattr(page.context, SCREENSHOT_MS, int(self.robustness.screenshot_s * 1000))

    def reset(self, seed: int = 0) -> Observation:
        """Start the browser and the task, the start page retried with backoff, each attempt a new
        BrowserGym reset (it closes the last attempt's browser context; ``harness.robust``);
        ``SiteUnreachable`` when it did not load in any attempt (its host then joins the blocklist
        file, when there is one)."""
        r = self.robustness
        for attempt in range(r.start_retries + 1):
            if attempt:
                time.sleep(r.backoff_s * 2 ** (attempt - 1))
            t = time.perf_counter()
            try:
                return self._reset_once(seed)
            except Exception as e:
                self.diagnostics.append(diagnostic("start", e, attempt, self._start_url_tried(e),
                                                   time.perf_counter() - t))
                if not isinstance(e, SiteUnreachable) or not transient(str(e)):
                    raise
        if r.blocklist:
            add_to_blocklist(r.blocklist, self.diagnostics[-1]["host"], f"start page failed {attempt + 1} times: "
                                                                         f"{self.diagnostics[-1]['error']}")
        raise SiteUnreachable(f"{self.diagnostics[-1]['error']} (after {attempt + 1} attempts)")

    def _reset_once(self, seed: int) -> Observation:
        """One attempt at the start page."""
        t = time.perf_counter()
        try:
            if self.env is None:
                self.env = self._make()
            obs, _ = self.env.reset(seed=seed)
            self.task_done, self.reward = False, 0.0
            url = obs["url"]
            if url.startswith("chrome-error://") or url == "about:blank":
                raise SiteUnreachable(f"start page did not load (at {url})")
            self.start_url = task_start_url(getattr(self.env.task, "inner", self.env.task)) or url
            self.env.context.set_default_timeout(self.robustness.action_s * 1000)
            return self._observe(obs)
        except SiteUnreachable:
            raise
        except Exception as e:
            text = f"{type(e).__name__}: {e}"
            if "net::ERR_" in text or "ECONNREFUSED" in text or "Timeout" in type(e).__name__:
                raise SiteUnreachable(text.splitlines()[0]) from None
            raise
        finally:
            self.browser_s += time.perf_counter() - t

    def _start_url_tried(self, error) -> str:
        """The start page an attempt went for: the task's declared one, else the URL in
        Playwright's error ('... at http://host/path'), else ''."""
        task = getattr(self.env, "task", None) if self.env is not None else None
        url = task_start_url(getattr(task, "inner", task)) if task is not None else None
        if url:
            return url
        words = [w for w in str(error).split() if "://" in w and not w.startswith("chrome-error")]
        return words[-1].rstrip(".,)") if words else ""

    def refused(self, action) -> str | None:
        """Why an action may not run (navigation outside the configured hosts, or to a host on
        the blocklist), else None."""
        if getattr(action, "op", None) != "goto":
            return None
        host = host_of(str(action.value))
        if host in read_blocklist(self.robustness.blocklist):
            return f"refused: goto({action.value!r}) goes to a host on the blocklist ({self.robustness.blocklist})"
        if self.allowed_hosts is None:
            return None
        if host not in self.allowed_hosts:
            return (f"refused: goto({action.value!r}) leaves the configured sites "
                    f"({', '.join(sorted(self.allowed_hosts))})")
        return None

    def step(self, action: str) -> Observation:
        """Run one action; an exception (the browser, not the action: BrowserGym reports an
        action's own failure in ``last_action_error``) is recorded in ``diagnostics`` and raised."""
        t = time.perf_counter()
        try:
            obs, reward, terminated, *_ = self.env.step(action)
            self.task_done = self.live_validation and bool(terminated)
            self.reward = float(reward) if self.live_validation else 0.0
            return self._observe(obs)
        except Exception as e:
            phase = "screenshot" if isinstance(e, ScreenshotError) else "action"
            self.diagnostics.append(diagnostic(phase, e, 0, self._page_url(), time.perf_counter() - t))
            raise
        finally:
            self.browser_s += time.perf_counter() - t

    def _page_url(self) -> str:
        try:
            return self.env.page.url
        except Exception:
            return ""

    def element_under(self, bid: str) -> dict | None:
        """A.2: what lies at the centre of element ``bid`` (``harness.robust.element_under``);
        None without probes."""
        return element_under(self.env.page, bid) if self.element_probes and self.env is not None else None

    def focused_element(self) -> dict | None:
        """A.2: the element that has focus (``harness.robust.focused_element``); None without probes."""
        return focused_element(self.env.page) if self.element_probes and self.env is not None else None

    def evaluate(self) -> tuple[float, dict]:
        """Run the task's real validator once, on the final page and chat."""
        t = time.perf_counter()
        try:
            env = self.env
            reward, done, message, info = env.task.inner.validate(env.page, env.chat.messages)
            return float(reward), {"done": done, "message": message, **(info or {})}
        except Exception as e:
            self.diagnostics.append(diagnostic("evaluate", e, 0, self._page_url(), time.perf_counter() - t))
            raise
        finally:
            self.browser_s += time.perf_counter() - t

    def close(self):
        if self.env is not None:
            try:
                self.env.close()
            finally:
                self.env = None
                _stop_global_playwright()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
