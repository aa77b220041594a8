"""``python -m search.mag --demo`` end to end through the real CLI, client, browser and demo
shop, with a scripted policy and a scripted PRM behind the OpenAI protocol: the baseline's greedy
output is valid but wrong (it never progresses), the PRM picks the right one of N outputs and
succeeds; records, summary and the Table-1 file must say exactly that. The guided run's policy
prompt comes from ``--policy-prompt-template``; the PRM's requests hold actions only (MAG:
Action-Only), with the menu in the AXTree section."""

import json
import re
from pathlib import Path

import pytest
from scripted_llm import scripted_server
from shop_scripts import GUIDES, URL_TEMPLATE, mag_output, menu_id, menu_of_prompt, right_output

import search.mag as mag
from judgment.parse import parse_prompt
from search.demo_site import TASK_ID

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _block(text, name):
    return re.search(rf"<<<BEGIN {name}>>>\n(.*?)\n<<<END {name}>>>", text, re.S).group(1)


def test_demo_cli_baseline_and_prm(tmp_path):
    prompts, judged, policy_tokens = [], [], set()

    def policy(payload):
        content = payload["messages"][-1]["content"]
        prompts.append(payload["messages"])
        policy_tokens.add(payload.get("max_tokens"))
        text = content if isinstance(content, str) else content[0]["text"]
        menu = menu_of_prompt(text)
        home = mag_output("click", menu_id(menu, "LINK", "Home"), None, "Go back to the home page.")
        if "<<<BEGIN URL>>>" not in text:       # the default prompt (the baseline's) has no URL (App. C)
            return [home] * payload["n"]
        return ([home, right_output(_block(text, "URL"), menu), "not json"] * 3)[:payload["n"]]

    def prm(payload):
        judged.append(payload["messages"])
        better = 2 if "LINK Home" in parse_prompt(payload["messages"]).response_1 else 1
        return [f"Response {better} follows the task. <Answer>Response {better}</Answer>"]

    template = tmp_path / "policy.yaml"
    template.write_text(URL_TEMPLATE)

    policy_srv, prm_srv = scripted_server(policy), scripted_server(prm)
    common = ["--demo", "--policy", "scripted", "--policy-base-url", policy_srv.base_url,
              "--policy-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--policy-cache-dir", str(tmp_path / "llm"),
              "--max-steps", "10"]
    try:
        assert mag.main([*common, "--prm", "none", "--out", str(tmp_path / "base")]) == 0
        assert mag.main([*common, "--prm", "scripted-prm", "--prm-base-url", prm_srv.base_url,
                         "--prm-api-key-env", "SURFPRM_TEST_KEY_UNSET", "--prm-cache-dir", str(tmp_path / "llm"),
                         "--n", "3", "--out", str(tmp_path / "prm"), "--baseline", str(tmp_path / "base"),
                         "--save-screenshots", "--policy-prompt-template", str(template)]) == 0
    finally:
        policy_srv.shutdown()
        prm_srv.shutdown()

    assert policy_tokens == {1024}              # MAG §3.1's 1,024 output tokens unless --policy-max-tokens
    assert json.loads((tmp_path / "prm" / "run.json").read_text())["policy_max_tokens"] == 1024
    base = json.loads((tmp_path / "base" / "summary.json").read_text())
    assert base["SR"] == 0.0 and base["terminations"] == {"step_budget": 1} and base["OFCR"] == 1.0
    assert base["GGS"] == 0.0 and base["G"] < 0.5
    guided = json.loads((tmp_path / "prm" / "summary.json").read_text())
    assert guided["SR"] == 1.0 and guided["terminations"] == {"answered": 1}
    assert guided["OFCR"] == 1.0 and guided["OFCR_outputs"] == pytest.approx(2 / 3)
    assert guided["G"] == pytest.approx(1.0) and guided["GGS"] == pytest.approx(1.0)
    assert guided["tax"] == pytest.approx(0.0)
    lines = [json.loads(l) for l in (tmp_path / "prm" / "tasks" / f"{TASK_ID}.jsonl").read_text().splitlines()]
    steps, result = lines[:-1], lines[-1]
    assert [s["guide"] for s in steps] == GUIDES and result["guides"] == GUIDES
    assert result["answer"] == "Your order number is A-100" and result["success"]
    assert all(len(s["bracket"]["matches"]) == 1 and s["bracket"]["candidates"][2]["dropped"].startswith("invalid")
               for s in steps)
    table = (tmp_path / "prm" / "table.md").read_text().splitlines()
    assert cells(table[2])[:3] == ["scripted + no PRM", "0.0", "100.0"]
    assert cells(table[3]) == ["scripted + scripted-prm"] + ["100.0"] * 8 + ["0.0"]
    assert len(list((tmp_path / "prm" / "shots" / TASK_ID).glob("*.png"))) == len(steps)
    # an endpoint policy gets the marked screenshot as an image part (--screenshot auto); the
    # baseline the default prompt, the guided run the template's exact text
    first = prompts[0][-1]["content"]
    assert isinstance(first, list) and first[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert first[0]["text"].startswith("Task:\n") and "OUTPUT CONTRACT" in prompts[0][0]["content"]
    guided = prompts[-1]
    assert guided[0]["content"].startswith("You write one JSON step")
    assert "<<<BEGIN URL>>>\nhttp://127.0.0.1" in guided[-1]["content"][0]["text"]
    # the PRM judged actions only: verb, target, content; never a think or a guide
    assert len(judged) == len(steps)
    for messages in judged:
        parts = parse_prompt(messages)
        text = "\n".join(m["content"] for m in messages)
        assert parts.response_1.startswith("action_type: ") and parts.response_2.startswith("action_type: ")
        assert parts.axtree.startswith("[1] LINK Home")                 # the menu stands in the AXTree section
        assert "The next step of the order." not in text and "Go back to the home page." not in text
        assert not any(g in text for g in GUIDES)
