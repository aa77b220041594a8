"""search.mag: WebArena task configs by id, task ids from the gold file, the preflight (exit 2
with a clear message, before any model or browser), resume, the Table-1 summary, and a WebArena
evaluator scoring a MAG task's answer offline."""

import json
import subprocess
import sys

import pytest

import search.mag as mag
from search.mag_metrics import TaskScore
from search.webarena import WA_VARS, score_answer

ALL_VARS = {v: f"http://127.0.0.1:9/{k}" for k, v in WA_VARS.items()}


def test_configs_by_webarena_id():
    configs = mag.load_task_configs([44, 27, 27])
    assert [c["task_id"] for c in configs] == [44, 27]
    assert configs[1]["sites"] == ["reddit"] and configs[1]["start_url"] == "__REDDIT__"
    with pytest.raises(mag.SetupError, match=r"no WebArena task with id \[812\]"):
        mag.load_task_configs([812])
    with pytest.raises(mag.SetupError, match="give --task-ids, or --gold-guides"):
        mag.load_task_configs(None)


def test_webarena_evaluator_scores_a_mag_answer_offline():
    config = mag.load_task_configs([27])[0]
    urls = {k: f"http://127.0.0.1:9/{k}" for k in WA_VARS}
    assert [score_answer(config, a, urls, evaluators="webarena") for a in ("0", "There are 3", None)] == [1.0, 0.0, 0.0]


def _run_cli(args, env, tmp_path):
    code = ("import sys, search.mag as mag\n"
            "mag.load_models = lambda a: sys.exit('models loaded')\n"
            "rc = mag.main(sys.argv[1:])\n"
            "assert not [m for m in sys.modules if m.startswith(('browsergym.', 'playwright', 'torch'))]\n"
            "sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path), **env})


def test_cli_exits_2_before_loading_anything(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"task_id": 27, "steps": [{"guide": "Open the forum."}]}) + "\n")
    out = tmp_path / "o"
    cases = [
        ([], {}, "no tasks: give --task-ids, or --gold-guides"),
        (["--gold-guides", str(gold)], {}, "missing environment variable(s): WA_SHOPPING"),
        (["--gold-guides", str(gold)], ALL_VARS, "site(s) not reachable: reddit at http://127.0.0.1:9/reddit"),
        (["--task-ids", "3"], ALL_VARS, "site(s) not reachable: shopping_admin"),
        (["--gold-guides", str(tmp_path / "typo.jsonl")], ALL_VARS, "typo.jsonl"),
    ]
    for extra, env, expect in cases:
        p = _run_cli(["--prm", "none", "--policy", "embedded", "--out", str(out), *extra], env, tmp_path)
        assert p.returncode == 2, p.stderr
        assert expect in p.stderr and "Traceback" not in p.stderr and "models loaded" not in p.stderr
    assert not out.exists()


def _result(task_id, success, evaluated=True, steps=4, compliant=3, G=None):
    score = TaskScore(str(task_id), float(success), steps, compliant, {"no_json": steps - compliant} if compliant < steps else {},
                      *( [G] * 4 + [G, success * (0.4 + 0.6 * G), success - success * (0.4 + 0.6 * G)] if G is not None
                         else [None] * 7))
    row = {"type": "result", "task_id": task_id, "site": "reddit", "termination": "answered" if evaluated else "env_error",
           "evaluated": evaluated, "reward": float(success) if evaluated else None, "n_steps": steps,
           "n_outputs": steps * 5, "n_outputs_compliant": compliant * 4}
    if evaluated:
        from dataclasses import asdict
        row["score"] = asdict(score)
    return row


def test_summary_and_table_in_the_papers_layout():
    rows = [_result(1, 1, G=0.5), _result(2, 0, G=0.25), _result(3, 1, evaluated=False)]
    s = mag.summarize_run(rows, gold={"1": ["a"], "2": ["b"]})
    assert s["tasks"] == 3 and s["env_failures"] == 1 and s["n_tasks"] == 2
    assert s["SR"] == 0.5 and s["OFCR"] == 6 / 8 and s["OFCR_outputs"] == 24 / 40
    assert s["G"] == pytest.approx(0.375) and s["GGS"] == pytest.approx((0.4 + 0.3) / 2)
    assert s["tax"] == pytest.approx(0.5 - 0.35)
    assert s["terminations"] == {"answered": 2, "env_error": 1}
    md = mag.table([("base", {"SR": 0.25, "OFCR": 0.9}), ("prm", s)])
    lines = md.splitlines()
    assert lines[0] == "| run | SR | OFCR | BLEU-1 | BLEU-2 | ROUGE-1 | ROUGE-L | G | GGS | Tax |"
    assert lines[2] == "| base | 25.0 | 90.0 | - | - | - | - | - | - | - |"
    assert lines[3] == "| prm | 50.0 | 75.0 | 37.5 | 37.5 | 37.5 | 37.5 | 37.5 | 35.0 | 15.0 |"


def test_resume_rebuilds_the_summary_without_models_or_browser(tmp_path):
    out = tmp_path / "o"
    (out / "tasks").mkdir(parents=True)
    (out / "tasks" / "27.jsonl").write_text(json.dumps({"type": "step", "step": 0}) + "\n" +
                                            json.dumps(_result(27, 1)) + "\n")
    base = tmp_path / "base"
    base.mkdir()
    (base / "summary.json").write_text(json.dumps({"SR": 0.0, "OFCR": 0.5, "policy": "p", "prm": "none"}))
    code = ("import sys, search.mag as mag\n"
            "mag.load_models = lambda a: sys.exit('models loaded')\n"
            "mag.preflight = lambda configs: {}\n"
            "sys.exit(mag.main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "--prm", "my-prm", "--policy", "p", "--task-ids", "27",
                        "--resume", "--out", str(out), "--baseline", str(base)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "1 tasks, 1 already done, 0 to run" in p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["SR"] == 1.0 and summary["prm"] == "my-prm" and summary["gold_file"] is False
    table = (out / "table.md").read_text().splitlines()
    assert table[2].startswith("| p + no PRM | 0.0 | 50.0 |") and table[3].startswith("| p + my-prm | 100.0 | 75.0 |")
