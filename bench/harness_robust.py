"""What OpenWebRL's robustness and feedback (``harness.robust``) cost per step, on the demo shop.

    .venv/bin/python bench/harness_robust.py [--steps 20] [--fail 2]

Three figures, headless Chromium on ``search/demo_site.py``'s shop:
- a step (``noop(0)``: BrowserGym's observation, screenshot included) with the timed screenshot
  (``page.screenshot`` within ``screenshot_s``) against BrowserGym's own CDP capture, which has no
  time-out (the context's ``SCREENSHOT_MS`` unset);
- the two element probes of the feedback (``element_under`` before a click, ``focused_element``
  after typing), each one ``page.evaluate``;
- a reset whose start page fails ``--fail`` times before it loads (the retries with a 0.2 s backoff)
  against one that loads at once.
Medians over ``--steps`` repetitions; one JSON line.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cli.config import make_parser  # noqa: E402
from flaky_site import FlakySite, open_task  # noqa: E402
from harness.env import BrowserHarness, host_of  # noqa: E402
from harness.robust import SCREENSHOT_MS, Robustness  # noqa: E402
from search.demo_site import Shop, make_task  # noqa: E402


def timed(fn, n: int) -> float:
    """Median seconds of ``n`` calls of ``fn``."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def steps(n: int) -> dict:
    with Shop() as shop, BrowserHarness(make_task(shop), allowed_hosts={host_of(shop.url)}) as h:
        obs = h.reset()
        box = next(line.split("[")[1].split("]")[0] for line in obs.axtree.splitlines() if "searchbox" in line)
        timed_s = timed(lambda: h.step("noop(0)"), n)
        setattr(h.env.context, SCREENSHOT_MS, None)          # BrowserGym's CDP capture
        cdp_s = timed(lambda: h.step("noop(0)"), n)
        under_s = timed(lambda: h.element_under(box), n)
        h.step(f"fill('{box}', 'kettle')")
        focused_s = timed(h.focused_element, n)
    return {"step_timed_screenshot_s": timed_s, "step_cdp_screenshot_s": cdp_s, "element_under_s": under_s,
            "focused_element_s": focused_s}


def resets(n: int, fail: int) -> dict:
    out = {}
    for name, failing in (("reset_loads_at_once_s", 0), (f"reset_after_{fail}_failures_s", fail)):
        times = []
        for _ in range(n):
            with FlakySite(fail=failing) as site, BrowserHarness(
                    open_task(site.url), robustness=Robustness(start_retries=fail, backoff_s=0.2)) as h:
                t = time.perf_counter()
                h.reset()
                times.append(time.perf_counter() - t)
        out[name] = statistics.median(times)
    return out


def main() -> None:
    ap = make_parser("bench/harness_robust.py", __doc__)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fail", type=int, default=2)
    ap.add_argument("--resets", type=int, default=3)
    args = ap.parse_args()
    print(json.dumps({**steps(args.steps), **resets(args.resets, args.fail)}, indent=1))


if __name__ == "__main__":
    main()
