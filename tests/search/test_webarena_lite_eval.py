"""WebArena-Lite's own evaluators score a right and a wrong answer offline, and its task class
builds offline (stubs from harness.env), in a fresh process: the evaluators assert site variables
at import and must not leak them into other tests."""

import json
import subprocess
import sys
from pathlib import Path

import search.webarena as wa

URLS = {k: f"http://127.0.0.1:9/{k}" for k in wa.WA_VARS}
SCRIPT = r"""
import json, os, sys
import search.webarena as wa
urls = json.loads(sys.argv[1])
out = {}
for tid, right, wrong in [
        (4, "Impulse Duffle, Overnight Duffle and Hawkeye Yoga Short-32-Blue", "Impulse Duffle and Overnight Duffle"),
        (15, "The store received 2 such reviews.", "The store received 12 such reviews."),
        (71, "15232", "15213")]:
    c = wa.load_task_configs([tid])[0]
    out[tid] = [wa.score_answer(c, right, urls), wa.score_answer(c, wrong, urls), wa.score_answer(c, None, urls)]
for var, url in zip(wa.WA_VARS.values(), urls.values()):
    os.environ[var] = url
from browsergym.webarenalite.task import WebArenaLiteTask
task = WebArenaLiteTask(seed=0, task_id=4)
out["start_url"] = task.task_configs[0]["start_url"]
print(json.dumps(out))
"""


def test_string_match_tasks_score_right_and_wrong_answers_offline(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(URLS)], capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).resolve().parents[2],
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "PYTHONPATH": "."})
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    # right answer 1, wrong 0 (a missing item; '12' is not the token '2'; another zip), no answer 0
    assert got["4"] == [1.0, 0.0, 0.0] and got["15"] == [1.0, 0.0, 0.0] and got["71"] == [1.0, 0.0, 0.0]
    assert got["start_url"] == URLS["shopping_admin"]


def test_only_answer_only_tasks_are_scored_offline():
    import pytest

    html_task = next(c for c in wa.load_task_configs() if c["eval"]["eval_types"] == ["program_html"])
    with pytest.raises(ValueError, match="needs a browser"):
        wa.score_answer(html_task, "x", URLS)
