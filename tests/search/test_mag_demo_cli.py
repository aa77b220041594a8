"""``python -m search.mag --demo`` end to end through the real CLI, client, browser and demo
shop, with a scripted policy and a scripted PRM behind the OpenAI protocol: the baseline's greedy
output is valid but wrong (it never progresses), the PRM picks the right one of N outputs and
succeeds; records, summary and the Table-1 file must say exactly that."""

import json
import re
from pathlib import Path

import pytest

import search.mag as mag
from scripted_llm import scripted_server
from search.demo_site import GOLD_GUIDES, TASK_ID

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]
GUIDES = GOLD_GUIDES[TASK_ID]


def _block(text, name):
    return re.search(rf"<<<BEGIN {name}>>>\n(.*?)\n<<<END {name}>>>", text, re.S).group(1)


def _menu(text):
    return [(int(i), kind, label) for i, kind, label in re.findall(r"^\[(\d+)\] (\S+) (.*)$", _block(text, "MENU"), re.M)]


def _find(menu, kind, label):
    return next(i for i, k, text in menu if k == kind and (text == label or text.startswith(label + " =")))


def _text(menu, i):
    return next(text for j, _, text in menu if j == i)


def _out(verb, target, content, guide):
    return json.dumps({"think": "", "action_type": verb, "selected_candidate_id": target, "content": content,
                       "guide_text": guide})


def right_output(prompt: str) -> str:
    url, menu = _block(prompt, "URL"), _menu(prompt)
    path = url.split("/", 3)[3]
    if path == "":
        box = _find(menu, "INPUT", "Search products")
        if "kettle" not in _text(menu, box):
            return _out("type", box, "kettle", GUIDES[0])
        return _out("press_enter", box, None, GUIDES[1])
    if path.startswith("search"):
        return _out("click", _find(menu, "LINK", "Blue Kettle"), None, GUIDES[2])
    if path.startswith("item/"):
        return _out("click", _find(menu, "LINK", "Order this item"), None, GUIDES[3])
    if path.startswith("order"):
        name, qty = _find(menu, "INPUT", "Name"), _find(menu, "SELECT", "Quantity")
        if "Ada" not in _text(menu, name):
            return _out("type", name, "Ada", GUIDES[4])
        if '"2"' not in _text(menu, qty):
            return _out("select", qty, "2", GUIDES[5])
        return _out("click", _find(menu, "BUTTON", "Place order"), None, GUIDES[6])
    return _out("finish", None, f"The order number is {url.split('n=')[1]}", GUIDES[7])


def test_demo_cli_baseline_and_prm(tmp_path):
    prompts = []

    def policy(payload):
        content = payload["messages"][-1]["content"]
        prompts.append(content)
        text = content if isinstance(content, str) else content[0]["text"]
        home = _out("click", _find(_menu(text), "LINK", "Home"), None, "Go back to the home page.")
        return ([home, right_output(text), "not json"] * 3)[:payload["n"]]

    def prm(payload):
        user = payload["messages"][-1]["content"]
        first = _block(user, "RESPONSE_1").rsplit("guide: ", 1)[-1]
        return [f"Response {1 if first in GUIDES else 2} follows the task. <Answer>Response {1 if first in GUIDES else 2}</Answer>"]

    policy_srv, prm_srv = scripted_server(policy), scripted_server(prm)
    common = ["--demo", "--policy", "scripted", "--policy-base-url", policy_srv.base_url,
              "--policy-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--policy-cache-dir", str(tmp_path / "llm"),
              "--max-steps", "10"]
    try:
        assert mag.main([*common, "--prm", "none", "--out", str(tmp_path / "base")]) == 0
        assert mag.main([*common, "--prm", "scripted-prm", "--prm-base-url", prm_srv.base_url,
                         "--prm-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--prm-cache-dir", str(tmp_path / "llm"),
                         "--n", "3", "--out", str(tmp_path / "prm"), "--baseline", str(tmp_path / "base"),
                         "--save-screenshots"]) == 0
    finally:
        policy_srv.shutdown()
        prm_srv.shutdown()

    base = json.loads((tmp_path / "base" / "summary.json").read_text())
    assert base["SR"] == 0.0 and base["terminations"] == {"step_budget": 1} and base["OFCR"] == 1.0
    assert base["GGS"] == 0.0 and base["G"] < 0.5
    guided = json.loads((tmp_path / "prm" / "summary.json").read_text())
    assert guided["SR"] == 1.0 and guided["terminations"] == {"answered": 1}
    assert guided["OFCR"] == 1.0 and guided["OFCR_outputs"] == pytest.approx(2 / 3)
    assert guided["G"] == pytest.approx(1.0) and guided["GGS"] == pytest.approx(1.0) and guided["tax"] == pytest.approx(0.0)
    lines = [json.loads(l) for l in (tmp_path / "prm" / "tasks" / f"{TASK_ID}.jsonl").read_text().splitlines()]
    steps, result = lines[:-1], lines[-1]
    assert [s["guide"] for s in steps] == GUIDES and result["guides"] == GUIDES
    assert result["answer"] == "The order number is A-100" and result["success"]
    assert all(len(s["bracket"]["matches"]) == 1 and s["bracket"]["candidates"][2]["dropped"].startswith("invalid")
               for s in steps)
    table = (tmp_path / "prm" / "table.md").read_text().splitlines()
    assert table[2].startswith("| scripted + no PRM | 0.0 | 100.0 |")
    assert table[3] == "| scripted + scripted-prm | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 0.0 |"
    assert len(list((tmp_path / "prm" / "shots" / TASK_ID).glob("*.png"))) == len(steps)
    # an endpoint policy gets the marked screenshot as an image part (--screenshot auto)
    assert isinstance(prompts[0], list) and prompts[0][1]["image_url"]["url"].startswith("data:image/png;base64,")
