"""The pair viewer in real Chromium (Playwright, Debian's chromium): the list's filters, both
targets marked and scrolled into view on a pair page, hostile page text shown as text, the pages
read with JavaScript off, and a 5-pair audit done by keyboard, reloaded, resumed by a restarted
server and summed up as its answers say.

Screenshots of the list, a pair and the audit are written to a temporary folder, and to
``docs/screenshots/`` (the README shows them) when ``SURFPRM_UPDATE_SCREENSHOTS=1``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT
from dataset.viewer.app import make_app
from dataset.viewer.audit import choice_of, draw_sample
from dataset.viewer.cli import main
from dataset.viewer.source import PairSource
from viewer_run import HOSTILE, Served, make_viewer_run

CHROMIUM = Path("/usr/lib/chromium/chromium")
SCREENSHOTS = ROOT / "docs" / "screenshots"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(),
                                 reason="Debian chromium not installed (make setup installs it)")]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewer_browser")
    made = make_viewer_run(root)
    return root, made, PairSource.open(root)


@pytest.fixture(scope="module")
def server(run):
    with Served(make_app(run[2])) as served:
        yield served


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    from harness.env import lighten_playwright_stacks

    lighten_playwright_stacks()

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM),
                               args=["--disable-gpu", "--disable-quic", "--disable-sync"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    p = context.new_page()
    p.set_default_timeout(10_000)
    yield p
    context.close()


def screenshot(page, name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    if os.environ.get("SURFPRM_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SCREENSHOTS / name)


def rows(page) -> list[dict]:
    return page.eval_on_selector_all("#pairs tbody tr", "trs => trs.map(tr => ({id: tr.dataset.pair, "
                                     "rule: tr.children[1].textContent, kept: tr.children[4].textContent}))")


def test_list_filters(server, run, page, tmp_path):
    made = run[1]
    page.goto(server.url + "/")
    assert len(rows(page)) == len(made["pairs"])
    rule = made["pairs"][0]["rule"]
    with page.expect_navigation():
        page.select_option("select[name=rule]", rule)          # applies on change (script)
    shown = rows(page)
    assert shown and {r["rule"] for r in shown} == {rule}
    assert len(shown) == sum(p["rule"] == rule for p in made["pairs"])
    assert page.inner_text("#count").startswith(f"{len(shown)} of {len(made['pairs'])} pairs shown")
    page.goto(server.url + "/")
    with page.expect_navigation():
        page.select_option("select[name=kept]", "discarded")
    assert [r["id"] for r in rows(page)] == [made["discarded"]]
    page.goto(server.url + "/")
    screenshot(page, "viewer-list.png", tmp_path)


def test_pair_page_marks_both_targets_in_view(server, run, page, tmp_path):
    source = run[2]
    pid = next(p["pair_id"] for p in source.pairs
               if p["kept"] and p["pair_id"] != run[1]["hostile"]
               and all(source.detail(p["pair_id"])["obs"].paths.get(k) for k in ("pos", "neg")))
    pair = source.by_id[pid]
    page.goto(f"{server.url}/pair/{pid}")
    pos, neg = page.locator("#target-pos"), page.locator("#target-neg")
    assert pos.is_visible() and neg.is_visible()
    assert pos.inner_text().strip().startswith(f"[{pair['pos_bid']}]")
    assert neg.inner_text().strip().startswith(f"[{pair['neg_bid']}]")
    colours = [el.evaluate("e => getComputedStyle(e).backgroundColor") for el in (pos, neg)]
    assert len(set(colours)) == 2 and "rgba(0, 0, 0, 0)" not in colours
    # scrolled into view inside the observation's own scroll box
    box, target = page.locator("#observation").bounding_box(), pos.bounding_box()
    assert box["y"] <= target["y"] and target["y"] + target["height"] <= box["y"] + box["height"]
    assert page.locator(".path-pos .crumb").count() >= 2 and page.locator(".path-neg .crumb").count() >= 2
    assert page.locator(".attempt").count() == pair["attempts"]
    assert not page.locator("#prompt").evaluate("d => d.open")       # collapsed until asked for
    screenshot(page, "viewer-pair.png", tmp_path)


def test_hostile_page_text_renders_as_text(server, run, page):
    made = run[1]
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server.url}/pair/{made['hostile']}")
    assert page.evaluate("window.__pwned") is None and not errors
    assert HOSTILE in page.inner_text("#intent")
    assert HOSTILE in page.inner_text("#observation")
    assert page.locator("#observation script, #observation img, #intent script, #intent img").count() == 0


def test_pages_read_without_javascript(browser, server, run):
    made = run[1]
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(server.url + "/")
        page.select_option("select[name=kept]", "discarded")
        page.click("form.filters button[type=submit]")
        page.wait_for_url("**/?*kept=discarded*")
        assert [r["id"] for r in rows(page)] == [made["discarded"]]
        page.goto(f"{server.url}/pair/{made['discarded']}")
        assert page.locator("#observation .line").count() > 10 and page.locator(".attempt").count() == 5
    finally:
        context.close()


def test_audit_by_keyboard_resumes_and_sums_up(run, page, tmp_path, capsys):
    root, _, source = run
    keys = ["1", "2", "3", "4", "2"]              # 3: both valid, 4: cannot tell
    sample = draw_sample(source.pairs, 5, seed=42)
    first = make_app(source, audit="kbd", sample=5, seed=42)
    with Served(first) as served:
        page.goto(served.url + "/audit")
        page.wait_for_url("**/audit/0")
        assert page.locator("text=Response 1").first.is_visible()
        # the page less the answer buttons (whose "both valid" names the negative, as the paper does)
        main_text = page.evaluate("() => { const m = document.querySelector('main').cloneNode(true); "
                                  "m.querySelector('form').remove(); return m.textContent; }")
        for hidden in (sample[0]["rule"], sample[0]["axis"],
                       "positive", "negative", "demonstrat", "verdict", "teacher"):
            assert hidden not in main_text          # blind: no rule, label or verdict
        screenshot(page, "viewer-audit.png", tmp_path)
        for i in (0, 1):
            page.keyboard.press(keys[i])
            page.wait_for_url(f"**/audit/{i + 1}")
        page.reload()                                # a reload resubmits nothing
        assert page.url.endswith("/audit/2")
        assert pq.read_table(source.audit_dir / "human-kbd.parquet").num_rows == 2
    first.state.audit.close()       # the first viewer stops: its audit file is free
    # the viewer restarted: the audit continues with the first unanswered pair
    with Served(make_app(source, audit="kbd", sample=5, seed=42)) as served:
        page.goto(served.url + "/audit")
        page.wait_for_url("**/audit/2")
        page.keyboard.press("n")
        page.keyboard.type("both look right; 1 and 2 typed here answer nothing")
        page.keyboard.press("Escape")
        page.keyboard.press(keys[2])
        page.wait_for_url("**/audit/3")
        page.keyboard.press(keys[3])
        page.wait_for_url("**/audit/4")
        page.keyboard.press(keys[4])
        page.wait_for_selector("#summary")
        summary_text = page.inner_text("#summary")
    answers = pq.read_table(source.audit_dir / "human-kbd.parquet").to_pylist()
    assert [a["answer"] for a in answers] == ["1", "2", "both", "cannot_tell", "2"]
    assert answers[2]["note"] == "both look right; 1 and 2 typed here answer nothing"
    choices = [choice_of(a, p["pos_shown"]) for a, p in zip(["1", "2", "both", "cannot_tell", "2"], sample)]
    judged = [c for c in choices if c != "cannot_tell"]
    k = sum(c in ("both", "neg") for c in judged)
    assert f"false negatives: {100 * k / len(judged):.1f}% ({k}/{len(judged)};" in summary_text
    assert main(["summary", "--run", str(root), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["annotators"]["kbd"]
    assert figures["false_negatives"]["k"] == k and figures["answered"] == 5
    decisive = [c for c in choices if c in ("pos", "neg")]
    assert figures["agree_label"] == pytest.approx({**figures["agree_label"], "k": decisive.count("pos"),
                                                    "n": len(decisive)})
