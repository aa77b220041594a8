"""MAG harness cost on local pages: the Set-of-Mark observation, and one embedded episode.

    .venv/bin/python bench/mag.py [--repeats 10] [--steps 4] [--n 5] [--max-tokens 80]

Part 1 times ``search.mag.som.observe`` (marks collected by JavaScript in the page, the menu, the
boxes drawn on the 1440x900 screenshot and PNG-encoded) on pages with 11, 200 and 2,000
interactive elements, split into the collection (``collect_elements``) and the drawing
(``draw_marks``); BrowserGym's own observation (AXTree, DOM snapshot, screenshot) is the
``harness.step`` time around it, reported for comparison. Part 2 runs one guided MAG episode on
the local shop with the embedded SmolLM2 as policy (N outputs) and PRM, and reports per-step
policy, judge, browser and observation time, plus the share of the embedded policy's outputs
that are format-compliant (``OFCR_outputs``). Each step's outputs are joined by two valid
scripted ones so that the PRM always has a match. Caches are off (a fresh folder).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "search")]

from local_pages import MARKS_PAGE, Pages, many_links_page, open_page_task  # noqa: E402
from shop_scripts import mag_output  # noqa: E402

from cli.config import make_parser  # noqa: E402
from harness.env import BrowserHarness, host_of  # noqa: E402
from llm import LLMConfig  # noqa: E402
from llm.embedded import default_model_dir  # noqa: E402
from prm.judge import LocalJudge  # noqa: E402
from search.demo_site import Shop, make_task  # noqa: E402
from search.mag import som  # noqa: E402
from search.mag.agent import MagPolicy, run_mag_episode  # noqa: E402
from search.tournament import prm_pair_judge, prm_state  # noqa: E402


def _ms(xs):
    return f"{1000 * statistics.median(xs):.0f} ms (min {1000 * min(xs):.0f}, max {1000 * max(xs):.0f})"


def observation_costs(repeats: int) -> None:
    pages = {"/marks": MARKS_PAGE, "/many200": many_links_page(200), "/many2000": many_links_page(2000)}
    with Pages(pages) as site:
        for path in pages:
            with BrowserHarness(open_page_task(site.url + path), viewport=som.VIEWPORT,
                                action_subsets=som.MAG_ACTION_SUBSETS) as h:
                h.reset(0)
                collect, draw, total, bg = [], [], [], []
                for _ in range(repeats):
                    t = time.perf_counter()
                    h.step("noop(0)")
                    bg.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    elements = som.collect_elements(h.env.page)
                    collect.append(time.perf_counter() - t)
                    marks, found = som.number_marks(elements)
                    t = time.perf_counter()
                    som.draw_marks(h.last_obs["screenshot"], marks)
                    draw.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    som.observe(h)
                    total.append(time.perf_counter() - t)
                print(f"{path}: {found} interactive, {len(marks)} marks | observe {_ms(total)} = "
                      f"collect {_ms(collect)} + draw/PNG {_ms(draw)} | BrowserGym step+obs {_ms(bg)}")


def episode(steps: int, n: int, max_tokens: int) -> None:
    cache = tempfile.mkdtemp(prefix="bench-mag-")
    policy = MagPolicy(LLMConfig(temperature=1.0, max_tokens=max_tokens, cache_dir=cache))
    judge = LocalJudge.from_pretrained(str(default_model_dir()), max_tokens=48, batch_size=8)
    def judge_for(obs, history):
        return prm_pair_judge(judge, prm_state(obs, history),
                              budget=1500)

    def propose(obs, guides, n_, step):
        links = [m for m in obs.marks if m.type in ("LINK", "BUTTON")][:1]
        extra = [mag_output("click", m.id, None, f"Click {m.text}.") for m in links]
        extra.append(mag_output("scroll", None, "down", "Scroll down."))
        return policy.propose(obs, guides, n_, step) + extra

    with Shop() as shop, BrowserHarness(make_task(shop), allowed_hosts={host_of(shop.url)}, viewport=som.VIEWPORT,
                                        action_subsets=som.MAG_ACTION_SUBSETS) as h:
        ep = run_mag_episode(h, propose, judge_for, n=n + 2, max_steps=steps, seed=0)
    real = [r for s in ep.steps for r in s.output_reasons[:n]]       # the model's own outputs
    print(f"episode: {len(ep.steps)} steps, termination {ep.termination}")
    print(f"  per step: policy {_ms([s.policy_s for s in ep.steps])}, judge {_ms([s.judge_s for s in ep.steps])}, "
          f"browser {_ms([s.browser_s for s in ep.steps])}, "
          f"observe {_ms([s.observe_s for s in ep.steps if s.observe_s])}")
    print(f"  embedded policy OFCR_outputs {sum(r is None for r in real)}/{len(real)}; reasons: "
          f"{sorted({(r or 'ok').split(':')[0] for r in real})}")


def main(argv=None) -> int:
    ap = make_parser(prog="bench/mag.py")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=80)
    args = ap.parse_args(argv)
    observation_costs(args.repeats)
    episode(args.steps, args.n, args.max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
