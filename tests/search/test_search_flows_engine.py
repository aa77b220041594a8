"""The ``search-webarena`` and ``search-mag`` flows through the Prefect engine on the built-in
demo shop (``--demo``), with scripted OpenAI-protocol policies and PRMs: both flow runs complete
and return summaries in which the PRM's picks solved the task."""

import json
import re
from pathlib import Path

import pytest

from data.judgment import parse_prompt

from scripted_llm import scripted_server
from shop_scripts import find, menu_of_prompt, right_action, right_output

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]


class _Obs:
    def __init__(self, axtree, url):
        self.axtree, self.url = axtree, url


def _between(text, start, end):
    return text[text.index(start) + len(start):text.index(end, text.index(start))]


def _block(text, name):
    return re.search(rf"<<<BEGIN {name}>>>\n(.*?)\n<<<END {name}>>>", text, re.S).group(1)


def _llm(tmp_path, base_url):
    return {"base_url": base_url, "api_key_env": "SURFPRM_TEST_KEY_UNSET", "cache_dir": str(tmp_path / "llm")}


def test_search_flows_on_the_demo_shop(prefect_harness, tmp_path):
    from flows.search import search_mag_flow, search_webarena_flow
    from search.webarena import WebArenaSearch

    def wa_policy(payload):        # BrowserGym actions: a wrong link, then the right action
        user = payload["messages"][-1]["content"]
        obs = _Obs(_between(user, "# Accessibility tree\n", "\n\n# Actions so far"),
                   _between(user, "# Current URL\n", "\n\n# Accessibility tree"))
        wrong = f"click('{find(obs.axtree, 'link', 'Home')}')"
        return [f"```\n{a}\n```" for a in (wrong, right_action(obs))][:payload["n"]]

    def wa_prm(payload):
        parts = parse_prompt(payload["messages"])
        right = right_action(_Obs(parts.axtree, parts.current_url))
        return [f"<Answer>Response {1 if parts.response_1 == right else 2}</Answer>"]

    def mag_policy(payload):
        content = payload["messages"][-1]["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        return ["not json", right_output(_block(text, "URL"), menu_of_prompt(text)), "not json"][:payload["n"]]

    def mag_prm(payload):
        return ["<Answer>Response 1</Answer>"]      # one valid output per step: never asked

    servers = {k: scripted_server(f) for k, f in
               (("wa_policy", wa_policy), ("wa_prm", wa_prm), ("mag_policy", mag_policy), ("mag_prm", mag_prm))}
    try:
        wa = search_webarena_flow(WebArenaSearch(
            prm="scripted-prm", policy="scripted", out=str(tmp_path / "wa"), n=2, max_steps=12, demo=True,
            prm_llm=_llm(tmp_path, servers["wa_prm"].base_url), policy_llm=_llm(tmp_path, servers["wa_policy"].base_url)))
        # as a deployment passes it: the config as JSON-like parameters
        mg = search_mag_flow({"prm": "scripted-prm", "policy": "scripted", "out": str(tmp_path / "mag"), "n": 3,
                              "max_steps": 10, "demo": True, "prm_llm": _llm(tmp_path, servers["mag_prm"].base_url),
                              "policy_llm": _llm(tmp_path, servers["mag_policy"].base_url)})
    finally:
        for s in servers.values():
            s.shutdown()
    assert wa["macro_success"] == 1.0 and wa["terminations"] == {"answered": 1}
    assert mg["SR"] == 1.0 and mg["GGS"] == pytest.approx(1.0) and mg["OFCR_outputs"] == pytest.approx(1 / 3)
    rows = [json.loads(l) for l in (tmp_path / "wa" / "tasks" / "demo-shop.jsonl").read_text().splitlines()]
    assert all(len(r["bracket"]["matches"]) == 1 for r in rows[:-1]) and rows[-1]["answer"].endswith("A-100")
