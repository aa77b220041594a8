"""``python -m search.mag --demo --diagnostics`` through the real CLI, client, browser and demo
shop, with a scripted policy behind the OpenAI protocol: the policy is teacher-forced along the
gold path (the gold guides so far as its history, one greedy output per gold step) and the means
land in summary.json under ``diagnostics``."""

import json
from pathlib import Path

import pytest
from scripted_llm import scripted_server
from shop_scripts import GUIDES, URL_TEMPLATE, mag_output, menu_id, menu_of_prompt, right_output

import search.mag as mag
from search.demo_site import GOLD_STEPS, TASK_ID

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def _url(text):
    return text.split("<<<BEGIN URL>>>\n", 1)[1].split("\n", 1)[0]


def test_demo_diagnostics_teacher_forced(tmp_path, capsys):
    histories, temperatures = [], set()

    def policy(payload):
        text = payload["messages"][-1]["content"]
        temperatures.add(payload.get("temperature"))
        histories.append(text.split("<<<BEGIN MENU>>>")[0])
        menu = menu_of_prompt(text)
        if "Blue Kettle" in text and "/search" in _url(text):        # one wrong click, on the results page
            return [mag_output("click", menu_id(menu, "LINK", "Home"), None, 'Open "Home".')] * payload["n"]
        return [right_output(_url(text), menu)] * payload["n"]

    template = tmp_path / "policy.yaml"
    template.write_text(URL_TEMPLATE.replace("{task}", "{task}\n  <<<BEGIN GUIDES>>>\n  {guides}\n  <<<END GUIDES>>>"))
    srv = scripted_server(policy)
    try:
        rc = mag.main(["--demo", "--diagnostics", "--prm", "none", "--policy", "scripted", "--policy-base-url",
                       srv.base_url, "--policy-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--policy-cache-dir",
                       str(tmp_path / "llm"), "--policy-prompt-template", str(template), "--max-steps", "1",
                       "--screenshot", "off",
                       "--out", str(tmp_path / "run")])
    finally:
        srv.shutdown()
    assert rc == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    d = summary["diagnostics"]
    assert summary["infra_diagnostics"] == {}                 # the browser's failures are counted apart
    n = len(GOLD_STEPS[TASK_ID])
    assert d["n_steps"] == n and d["n_tasks"] == 1 and not d["stopped"] and not d["env_failures"]
    assert d["SAA"] == pytest.approx((n - 1) / n) and d["F"] == 1.0        # the one wrong click has A = 0
    steps = [json.loads(l) for l in (tmp_path / "run" / "diagnostics" / f"{TASK_ID}.jsonl").read_text().splitlines()]
    assert [s["A"] for s in steps] == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert d["GACS"] == pytest.approx(sum(s["GACS"] for s in steps) / n) and 0 < d["GACS"] < d["SAA"]
    assert steps[2]["Faith"] == 1.0 and steps[2]["GACS"] == 0.0               # a faithful guide of a wrong step
    # teacher forcing: at gold step k the history is the first k gold guides, whatever the policy wrote
    forced = histories[-n:]
    for k, text in enumerate(forced):
        assert all(g in text for g in GUIDES[:k]) and (k == n - 1 or GUIDES[k] not in text)
    assert temperatures == {0.0}                                              # greedy
    assert "teacher-forced diagnostics (MAG App. D) over 8 gold steps" in capsys.readouterr().err
