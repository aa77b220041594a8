"""Golden files: the outputs of a WebArena demo-shop run, a MiniWoB run and a MAG demo run, each
through its real CLI, browser and scripted OpenAI-protocol policy and PRM, stay what they were
(``summary.json``, ``run.json``, every task's JSONL lines, MAG's ``table.md``), one file per run in
``tests/golden/search/``. What varies from run to run is a placeholder (``golden_files.stable``:
timings, the worker, the run id, MiniWoB's time-discounted rewards; the demo shop's port, the
miniwob wheel's folder, the temporary folder).

Regenerate after an intended change: ``make golden`` (``SURFPRM_UPDATE_GOLDEN=1``), then review
``git diff tests/golden/search``."""

import json
import re
from pathlib import Path

import pytest
from miniwob_scripts import actions, bid, quoted
from scripted_llm import scripted_server
from shop_scripts import URL_TEMPLATE, find, mag_output, menu_id, menu_of_prompt, right_action, right_output

from golden_files import VARYING, check, stable
from judgment.parse import parse_prompt

CHROMIUM = Path("/usr/lib/chromium/chromium")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")]
# timings, the process, the run's id; MiniWoB's rewards fall with the seconds an episode took
SEARCH_VARYING = VARYING | {"policy_s", "judge_s", "browser_s", "observe_s", "worker", "run_id", "REWARD_GLOBAL",
                            "RAW_REWARD_GLOBAL"}


class _Obs:
    def __init__(self, axtree, url):
        self.axtree, self.url = axtree, url


def _between(text, start, end):
    return text[text.index(start) + len(start):text.index(end, text.index(start))]


def _llm_flags(role: str, server, tmp_path) -> list[str]:
    return [f"--{role}-base-url", server.base_url, f"--{role}-api-key-env", "SURFPRM_TEST_KEY_UNSET",
            f"--{role}-cache-dir", str(tmp_path / "llm")]


def _run(main, tmp_path, policy, prm, *flags) -> Path:
    servers = scripted_server(policy), scripted_server(prm)
    out = tmp_path / "out"
    try:
        rc = main(["--policy", "scripted", *_llm_flags("policy", servers[0], tmp_path), "--prm", "scripted-prm",
                   *_llm_flags("prm", servers[1], tmp_path), "--out", str(out), *flags])
    finally:
        for s in servers:
            s.shutdown()
    assert rc == 0
    return out


def webarena_demo(tmp_path) -> Path:
    """``search.webarena --demo``: the policy proposes a wrong link and the right action, the PRM
    picks the right one."""
    from search.webarena import main

    def policy(payload):
        user = payload["messages"][-1]["content"]
        obs = _Obs(_between(user, "# Accessibility tree\n", "\n\n# Actions so far"),
                   _between(user, "# Current URL\n", "\n\n# Accessibility tree"))
        wrong = f"click('{find(obs.axtree, 'link', 'Home')}')"
        return [f"```\n{a}\n```" for a in (wrong, right_action(obs), "no action here")][:payload["n"]]

    def prm(payload):
        parts = parse_prompt(payload["messages"])
        right = right_action(_Obs(parts.axtree, parts.current_url))
        return [f"<Answer>Response {1 if parts.response_1 == right else 2}</Answer>"]

    return _run(main, tmp_path, policy, prm, "--demo", "--n", "3", "--max-steps", "12")


def miniwob(tmp_path) -> Path:
    """``search.miniwob`` on two tasks and two seeds: the right and the wrong action, the PRM picks
    the right one."""
    from search.miniwob import main

    def policy(payload):
        both = actions(payload["messages"][-1]["content"])
        return [f"Thought.\n```\n{both['wrong']}\n```", f"```\n{both['right']}\n```"][:payload["n"]]

    def prm(payload):
        parts = parse_prompt(payload["messages"])

        def right(action):
            if parts.intent.startswith("Click on the"):
                return action == f"click('{bid(parts.axtree, 'button', quoted(parts.intent))}')"
            return "zz'" not in action
        return [f"<Answer>Response {1 if right(parts.response_1) else 2}</Answer>"]

    return _run(main, tmp_path, policy, prm, "--tasks", "click-button", "enter-text", "--seeds", "0-1",
                "--n", "2", "--max-steps", "4")


def mag_demo(tmp_path) -> Path:
    """``search.mag --demo``: a Home click, the right step and an invalid output; the PRM prefers
    anything but Home."""
    from search.mag import main

    def policy(payload):
        content = payload["messages"][-1]["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        menu = menu_of_prompt(text)
        url = re.search(r"<<<BEGIN URL>>>\n(.*?)\n<<<END URL>>>", text, re.S).group(1)
        home = mag_output("click", menu_id(menu, "LINK", "Home"), None, "Go back to the home page.")
        return [home, right_output(url, menu), "not json"][:payload["n"]]

    def prm(payload):
        better = 2 if "LINK Home" in parse_prompt(payload["messages"]).response_1 else 1
        return [f"<Answer>Response {better}</Answer>"]

    template = tmp_path / "policy.yaml"
    template.write_text(URL_TEMPLATE)
    return _run(main, tmp_path, policy, prm, "--demo", "--n", "3", "--max-steps", "10",
                "--policy-prompt-template", str(template), "--screenshot", "off")


RUNS = {"webarena_demo": webarena_demo, "miniwob": miniwob, "mag_demo": mag_demo}


def outputs(out: Path, tmp_path: Path) -> dict:
    """The run folder's pinned outputs, file name -> content (JSON parsed), made stable."""
    from harness.miniwob import default_url

    found = {}
    for path in sorted([out / "summary.json", out / "run.json", *(out / "tasks").glob("*.jsonl"), out / "table.md"]):
        if path.exists():
            text = path.read_text()
            found[str(path.relative_to(out))] = (json.loads(text) if path.suffix == ".json" else
                                                 [json.loads(line) for line in text.splitlines()]
                                                 if path.suffix == ".jsonl" else text)
    return stable(found, {default_url(): "MINIWOB_URL/", str(tmp_path): "TMP"}, SEARCH_VARYING)


@pytest.mark.parametrize("name", list(RUNS))
def test_run_outputs_match_the_golden_files(name, tmp_path):
    check(f"search/{name}.json", outputs(RUNS[name](tmp_path), tmp_path))
