"""search.mag: WebArena task configs by id, task ids from the gold file, the preflight (exit 2
with a clear message, before any model or browser), resume, the Table-1 summary, and a WebArena
evaluator scoring a MAG task's answer offline."""

import json
import subprocess
import sys

import pytest

import search.mag as mag
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


def test_the_nltk_stub_reaches_an_nltk_imported_before_it(tmp_path, monkeypatch):
    """NLTK reads NLTK_DATA once, at import: a process that computed BLEU (MAG's guide scores)
    before WebArena's imports would miss the punkt_tab stub and have WebArena's evaluator look
    for the real data (offline: a LookupError)."""
    import nltk

    from harness.env import prepare_nltk_stub

    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))
    monkeypatch.delenv("NLTK_DATA", raising=False)
    root = prepare_nltk_stub(tmp_path)
    assert str(root) in nltk.data.path
    nltk.data.find("tokenizers/punkt_tab/english/")


def _run_cli(args, env, tmp_path):
    code = ("import sys, search.mag as mag, search.episodes as episodes\n"
            "episodes.load_models = lambda benchmark, config: sys.exit('models loaded')\n"
            "rc = mag.main(sys.argv[1:])\n"
            "assert not [m for m in sys.modules if m.startswith(('browsergym.', 'playwright', 'torch'))]\n"
            "sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path), **env})


def test_cli_exits_2_before_loading_anything(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"task_id": 27, "steps": [{"guide": "Open the forum."}]}) + "\n")
    out = tmp_path / "o"
    bad_template = tmp_path / "policy.yaml"
    bad_template.write_text("system: s\nuser: '{task} {page}'\n")
    cases = [
        ([], {}, "no tasks: give --task-ids, or --gold-guides"),
        (["--task-ids", "27", "--policy-prompt-template", str(bad_template)], ALL_VARS,
         "unknown placeholders ['page']"),
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


GOLD = {"1": ["Open the forum.", "Sort by new."], "2": ["Open the orders page."]}


def _result(task_id, success, guides=(), evaluated=True):
    reasons = [None, None, None, "no_json: x"]
    return {"type": "result", "task_id": task_id, "site": "reddit", "evaluated": evaluated,
            "termination": "answered" if evaluated else "env_error", "reward": float(success) if evaluated else None,
            "guides": list(guides), "reasons": reasons, "n_steps": 4, "n_outputs": 20, "n_outputs_compliant": 12}


def test_summary_and_table_in_the_papers_layout():
    # task 1 succeeds with no guide (G 0, GGS 0.4); task 2 fails with the gold guides (G 1, GGS 0)
    rows = [_result(1, 1), _result(2, 0, GOLD["2"]), _result(3, 1, evaluated=False)]
    s = mag.summarize_run(rows, gold=GOLD)
    # every task counts (task 3's environment failure is a task not solved), failures listed beside
    assert s["tasks"] == 3 and s["env_failures"] == 1 and s["n_tasks"] == 3
    assert s["SR"] == pytest.approx(1 / 3) and s["OFCR"] == 9 / 12 and s["OFCR_outputs"] == 36 / 60
    assert [f["task_id"] for f in s["env_failed_tasks"]] == [3] and s["macro"]["success_rate"] == pytest.approx(1 / 3)
    assert s["G"] == pytest.approx(0.5) and s["GGS"] == pytest.approx(0.2) and s["tax"] == pytest.approx(0.3)
    # guide columns over the 2 tasks with gold; corpus GGS over all 3 (task 3: no gold, not solved)
    assert s["n_with_gold"] == 2 and s["GGS_corpus"] == pytest.approx(0.4 / 3)
    assert s["terminations"] == {"answered": 2, "env_error": 1} and s["reasons"] == {"no_json": 3}
    assert "G" not in mag.summarize_run(rows, gold=None)
    md = mag.table([("base", {"SR": 0.25, "OFCR": 0.9}), ("prm", s)])
    lines = md.splitlines()
    assert cells(lines[0]) == ["run", "SR", "OFCR", "BLEU-1", "BLEU-2", "ROUGE-1", "ROUGE-L", "G", "GGS", "Tax"]
    assert set(lines[1]) <= set("|:-")
    assert cells(lines[2]) == ["base", "25.0", "90.0", "-", "-", "-", "-", "-", "-", "-"]
    assert cells(lines[3]) == ["prm", "33.3", "75.0", "50.0", "50.0", "50.0", "50.0", "50.0", "20.0", "30.0"]
    assert lines[5] == "- base: environment failures: 0"
    assert lines[6].startswith("- prm: SR: all 3 tasks run; OFCR: all 12 steps of all 3 tasks; ")
    assert "G, GGS, tax: the 2 tasks with gold guides" in lines[6]
    assert lines[6].endswith("corpus GGS 13.3; environment failures: 1 (tasks 3)")


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _resume(out, *extra, prm="my-prm"):
    code = ("import sys, search.mag as mag, search.episodes as episodes\n"
            "episodes.load_models = lambda benchmark, config: sys.exit('models loaded')\n"
            "import search.mag.run; search.mag.run.preflight = lambda configs: {}\n"
            "sys.exit(mag.main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, "--prm", prm, "--policy", "p", "--resume", "--out", str(out),
                           *extra], capture_output=True, text=True, timeout=60)


def test_resume_rescoring_reruns_and_settings(tmp_path):
    out = tmp_path / "o"
    (out / "tasks").mkdir(parents=True)
    (out / "tasks" / "1.jsonl").write_text(json.dumps({"type": "step", "step": 0}) + "\n" +
                                           json.dumps(_result(1, 1, GOLD["1"])) + "\n")
    (out / "tasks" / "2.jsonl").write_text(json.dumps(_result(2, 0, evaluated=False)) + "\n")
    # settings of a run made before a setting existed: a missing key means its default
    (out / "run.json").write_text(json.dumps({"prm": "my-prm", "policy": "p", "grounding": "som", "n": 5,
                                              "max_steps": 25, "seed": 0, "both_orders": False}))
    base = tmp_path / "base"
    base.mkdir()
    (base / "summary.json").write_text(json.dumps({"SR": 0.0, "OFCR": 0.5, "policy": "p", "prm": "none"}))

    p = _resume(out, "--task-ids", "1", "--baseline", str(base))
    assert p.returncode == 0, p.stderr
    assert "1 tasks, 1 already done, 0 to run" in p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["SR"] == 1.0 and summary["prm"] == "my-prm" and "G" not in summary
    table = (out / "table.md").read_text().splitlines()
    assert cells(table[2])[:3] == ["p + no PRM", "0.0", "50.0"]
    assert cells(table[3])[:3] == ["p + my-prm", "100.0", "75.0"]

    gold = tmp_path / "gold.jsonl"      # a gold file given later fills the guide columns from the stored guides
    gold.write_text(json.dumps({"task_id": 1, "steps": [{"guide": g} for g in GOLD["1"]]}) + "\n")
    p = _resume(out, "--task-ids", "1", "--gold-guides", str(gold))
    assert p.returncode == 0, p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["G"] == pytest.approx(1.0) and summary["GGS"] == pytest.approx(1.0)

    p = _resume(out, "--task-ids", "1", "2")        # the env failure runs again: models are needed
    assert p.returncode == 1 and "1 tasks, 1 already done" not in p.stderr and "models loaded" in p.stderr
    assert "2 tasks, 1 already done, 1 to run" in p.stderr

    p = _resume(out, "--task-ids", "1", prm="other-prm")
    assert p.returncode == 2 and "settings differ from the earlier run (prm)" in p.stderr
    # what the policy sees is a setting too: a resume with the screenshot switched is another run
    p = _resume(out, "--task-ids", "1", "--screenshot", "on")
    assert p.returncode == 2 and "settings differ from the earlier run (screenshot)" in p.stderr
