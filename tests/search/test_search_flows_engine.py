"""The ``search-webarena`` and ``search-mag`` flows through the Prefect engine on the built-in
demo shop (``--demo``), with scripted OpenAI-protocol policies and PRMs: both flow runs complete
and return summaries in which the PRM's picks solved the task; the WebArena run's episodes ingest
back as canonical trajectories."""

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from scripted_llm import scripted_server
from shop_scripts import URL_TEMPLATE, find, menu_of_prompt, right_action, right_output

from judgment.parse import parse_prompt

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


def _flow(flow, config, policy, prm):
    servers = [scripted_server(policy), scripted_server(prm)]
    try:
        return flow(config(servers[0].base_url, servers[1].base_url))
    finally:
        for s in servers:
            s.shutdown()


def test_search_webarena_flow_on_the_demo_shop(prefect_harness, tmp_path):
    from data.ingest import ingest
    from flows.search import search_webarena_flow
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

    wa = _flow(search_webarena_flow, lambda policy_url, prm_url: WebArenaSearch(
        prm="scripted-prm", policy="scripted", out=str(tmp_path / "wa"), n=2, max_steps=12, demo=True,
        prm_llm=_llm(tmp_path, prm_url), policy_llm=_llm(tmp_path, policy_url)), wa_policy, wa_prm)
    assert wa["macro"]["success_rate"] == 1.0 and wa["terminations"] == {"answered": 1}
    rows = [json.loads(l) for l in (tmp_path / "wa" / "tasks" / "demo-shop.jsonl").read_text().splitlines()]
    assert all(len(r["bracket"]["matches"]) == 1 for r in rows[:-1]) and rows[-1]["answer"].endswith("A-100")
    # the episode comes back as a canonical trajectory: the executed actions, then the final page
    stats = ingest("canonical", [tmp_path / "wa" / "trajectories.parquet"], tmp_path / "wa-run", quiet=True)
    steps = sorted(pq.read_table(tmp_path / "wa-run" / "trajectories.parquet").to_pylist(), key=lambda r: r["step_idx"])
    assert stats.n_out == len(rows) and not stats.rejected
    assert [r["action"] for r in steps] == [r["chosen"] for r in rows[:-1]] + [None]
    assert all(r["success"] and r["site"] == "127.0.0.1" for r in steps)


def test_search_mag_flow_on_the_demo_shop(prefect_harness, tmp_path):
    from flows.search import search_mag_flow

    def mag_policy(payload):
        content = payload["messages"][-1]["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        return ["not json", right_output(_block(text, "URL"), menu_of_prompt(text)), "not json"][:payload["n"]]

    def mag_prm(payload):
        return ["<Answer>Response 1</Answer>"]      # one valid output per step: never asked

    template = tmp_path / "policy.yaml"          # gives the scripted policy the URL too
    template.write_text(URL_TEMPLATE)
    # as a deployment passes it: the config as JSON-like parameters
    mg = _flow(search_mag_flow, lambda policy_url, prm_url: {
        "prm": "scripted-prm", "policy": "scripted", "out": str(tmp_path / "mag"), "n": 3, "max_steps": 10,
        "demo": True, "prm_llm": _llm(tmp_path, prm_url), "policy_llm": _llm(tmp_path, policy_url),
        "policy_prompt_template": str(template)}, mag_policy, mag_prm)
    assert mg["SR"] == 1.0 and mg["GGS"] == pytest.approx(1.0) and mg["OFCR_outputs"] == pytest.approx(1 / 3)
    assert not (tmp_path / "mag" / "trajectories.parquet").exists()      # MAG keeps its own format
