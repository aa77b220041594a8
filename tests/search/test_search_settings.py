"""The search settings that move success rates are named, recorded options (issue 22 item 5): both
AXTree budgets, MAG's 1,024 policy tokens, a generating PRM's 1,024 tokens, where a local PRM
loads; WebArena-Lite by the paper's five environments (item 6); and a search run shows its
progress and ends with a summary line (issue 25 item 3). No browser: the episodes are faked."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest

import search.episodes as episodes
import search.runner as runner
import search.webarena as wa
from llm import LLMConfig
from search.episodes import policy_llm_config, prm_llm_config
from search.mag import MAG, MagSearch
from search.miniwob import MINIWOB, MiniWoBSearch
from search.runner import parse_config
from search.webarena import WEBARENA_LITE, WebArenaSearch

BASE = ["--prm", "none", "--policy", "embedded"]


def test_axtree_budgets_are_declared_flags_with_the_stated_defaults(capsys):
    for bench, config in ((WEBARENA_LITE, WebArenaSearch), (MINIWOB, MiniWoBSearch)):
        cfg = parse_config(bench, BASE)
        assert (cfg.policy_axtree_chars, cfg.prm_axtree_chars) == (12_000, 12_000)
        cfg = parse_config(bench, BASE + ["--policy-axtree-chars", "3000", "--prm-axtree-chars", "4000"])
        assert isinstance(cfg, config) and (cfg.policy_axtree_chars, cfg.prm_axtree_chars) == (3000, 4000)
        assert {"policy_axtree_chars", "prm_axtree_chars"} <= set(bench.resume_settings)
    mag = parse_config(MAG, BASE + ["--prm-axtree-chars", "5000"])
    assert isinstance(mag, MagSearch) and mag.prm_axtree_chars == 5000 and not hasattr(mag, "policy_axtree_chars")
    assert "prm_axtree_chars" in MAG.resume_settings
    with pytest.raises(SystemExit):             # MAG's policy sees a Set-of-Mark menu, not the AXTree
        parse_config(MAG, BASE + ["--policy-axtree-chars", "3000"])
    for bad in (["--prm-axtree-chars", "0"], ["--policy-axtree-chars", "-1"], ["--prm-device", "tpu"],
                ["--prm-dtype", "float16"]):
        with pytest.raises(SystemExit):
            parse_config(WEBARENA_LITE, BASE + bad)
    err = capsys.readouterr().err
    assert "--prm-axtree-chars: must be >= 1, not 0" in err and "--policy-axtree-chars: must be >= 1" in err
    with pytest.raises(ValueError, match="--policy-axtree-chars must be at least 1"):     # a config built in Python
        WebArenaSearch(prm="none", policy="m", policy_axtree_chars=0).check()
    for bench in (WEBARENA_LITE, MINIWOB):
        with pytest.raises(SystemExit):
            parse_config(bench, ["--help"])
        text = capsys.readouterr().out
        assert "--policy-axtree-chars CHARS" in text and "--prm-axtree-chars CHARS" in text
        assert "(default: 12000)" in text and "--prm-device {auto,cpu,cuda}" in text
        assert "--prm-dtype {auto,float32,bfloat16}" in text
    # the constants the runner declares its choices with are prm.judge's
    from prm.judge import DEVICES, DTYPES

    assert (runner.DEVICES, runner.DTYPES) == (DEVICES, DTYPES)


def test_the_budgets_reach_the_policy_and_the_prm_prompts(monkeypatch):
    import prm.judge

    axtree = "[1] RootWebArea 'Shop'\n" + "\n".join(f"\t[{i}] link 'Product number {i} in the list'"
                                                     for i in range(2, 1200))
    prompts = []

    class Recording:
        def judge_prompts(self, batch):
            prompts.extend(batch)
            return [prm.judge.Judgment("<Answer>Response 1</Answer>", 1) for _ in batch]

    monkeypatch.setattr(prm.judge, "make_judge", lambda *a, **k: Recording())
    obs = SimpleNamespace(goal="open product 7", axtree=axtree, url="http://x/", start_url="http://x/")
    sizes = {}
    for chars in (2000, 8000):
        cfg = parse_config(WEBARENA_LITE, ["--prm", "my-prm", "--prm-base-url", "http://gpu/v1", "--policy", "m",
                                          "--policy-base-url", "http://gpu/v1", "--policy-axtree-chars", str(chars),
                                          "--prm-axtree-chars", str(chars)])
        propose = WEBARENA_LITE.agent.policy(cfg, policy_llm_config(cfg))
        assert propose.__self__.budget == chars
        from search.agent import build_messages

        user = build_messages(obs.goal, axtree, obs.url, [], budget=chars)[1]["content"]
        policy_tree = user.split("# Accessibility tree\n")[1].split("\n\n# Actions so far")[0]
        prompts.clear()
        episodes.judge_factory(cfg)(obs, [])([("click('7')", "click('9')")])
        sizes[chars] = (len(policy_tree), len(prompts[0][-1]["content"]))
        assert len(policy_tree) <= chars + 200
    # the PRM's prompt grows with its budget by about the difference, and stays within it
    assert 5000 < sizes[8000][1] - sizes[2000][1] <= 6200 and sizes[8000][0] > 3 * sizes[2000][0]


def test_token_defaults_mag_policy_1024_and_a_generating_prm_1024(tmp_path):
    mag = parse_config(MAG, BASE)
    assert policy_llm_config(mag, MAG.agent.policy_llm).max_tokens == 1024            # MAG §3.1
    mag80 = parse_config(MAG, BASE + ["--policy-max-tokens", "80"])                     # make mag-demo's
    assert policy_llm_config(mag80, MAG.agent.policy_llm).max_tokens == 80
    wa_cfg = parse_config(WEBARENA_LITE, BASE)
    assert policy_llm_config(wa_cfg, WEBARENA_LITE.agent.policy_llm).max_tokens == LLMConfig.max_tokens
    assert prm_llm_config(parse_config(WEBARENA_LITE, ["--prm", "embedded", "--policy", "m"])).max_tokens == 256
    gen = parse_config(WEBARENA_LITE, ["--prm", "embedded", "--policy", "m", "--prm-judge-mode", "generate"])
    assert prm_llm_config(gen).max_tokens == 1024
    gen48 = parse_config(WEBARENA_LITE, ["--prm", "embedded", "--policy", "m", "--prm-judge-mode", "generate",
                                        "--prm-max-tokens", "48"])
    assert prm_llm_config(gen48).max_tokens == 48
    endpoint = parse_config(WEBARENA_LITE, ["--prm", "p", "--prm-base-url", "http://gpu/v1", "--policy", "m"])
    assert prm_llm_config(endpoint).max_tokens == 1024


def _fake_run_task(benchmark, config, task, *args, **kwargs):
    return {"type": "result", "task_id": task[benchmark.task_key], "site": "demo", "termination": "answered",
            "evaluated": True, "success": True, "reward": 1.0, "n_steps": 1}


@pytest.mark.parametrize("bench", [WEBARENA_LITE, MAG])
def test_run_json_records_the_settings_and_a_resume_with_other_budgets_is_refused(tmp_path, monkeypatch, capsys,
                                                                                 bench):
    monkeypatch.setattr(episodes, "load_models", lambda benchmark, config: (None, None))
    monkeypatch.setattr(episodes, "run_task", _fake_run_task)
    benchmark = replace(bench, trajectory_site=None)
    out = str(tmp_path / "o")
    args = ["--demo", "--prm", "embedded", "--policy", "embedded", "--out", out, "--prm-axtree-chars", "6000",
            "--prm-device", "cpu"]
    if bench is WEBARENA_LITE:
        args += ["--policy-axtree-chars", "7000"]
    assert bench.Config is not None and runner.main(benchmark, args) == 0
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["prm_axtree_chars"] == 6000 and run["prm_device"] == "cpu" and run["prm_dtype"] == "auto"
    assert run["prm_placement"] == {"device": "cpu", "dtype": "float32"}
    assert run["prm_judge_mode_used"] == "score-both" and run["prm_max_tokens"] == LLMConfig.max_tokens
    if bench is WEBARENA_LITE:
        assert run["policy_axtree_chars"] == 7000 and run["policy_max_tokens"] == LLMConfig.max_tokens
    else:
        assert "policy_axtree_chars" not in run and run["policy_max_tokens"] == 1024
    assert runner.main(benchmark, args + ["--resume"]) == 0
    capsys.readouterr()
    other = [a if a != "6000" else "9000" for a in args]
    assert runner.main(benchmark, other + ["--resume"]) == 2
    assert "settings differ from the earlier run (prm_axtree_chars)" in capsys.readouterr().err
    if bench is WEBARENA_LITE:
        other = [a if a != "7000" else "9000" for a in args]
        assert runner.main(benchmark, other + ["--resume"]) == 2
        assert "(policy_axtree_chars)" in capsys.readouterr().err


def test_a_run_json_written_before_the_budgets_existed_resumes_at_the_defaults(tmp_path, monkeypatch):
    monkeypatch.setattr(episodes, "load_models", lambda benchmark, config: (None, None))
    monkeypatch.setattr(episodes, "run_task", _fake_run_task)
    monkeypatch.setattr(wa, "WEBARENA_LITE", replace(WEBARENA_LITE, trajectory_site=None))
    out = tmp_path / "o"
    assert wa.main(BASE + ["--demo", "--out", str(out)]) == 0
    run = json.loads((out / "run.json").read_text())
    for k in ("prm_axtree_chars", "policy_axtree_chars"):
        del run[k]
    (out / "run.json").write_text(json.dumps(run))
    assert wa.main(BASE + ["--demo", "--out", str(out), "--resume"]) == 0
    assert wa.main(BASE + ["--demo", "--out", str(out), "--resume", "--prm-axtree-chars", "100"]) == 2


# -- WebArena-Lite by the paper's five environments ------------------------------------------------

def test_the_task_file_groups_into_the_papers_five_environments():
    """The paper's unguided denominators (Table 3) from the task file search.webarena reads: each
    multi-site task under its first site other than Wikipedia."""
    configs = wa.load_task_configs()
    assert len(configs) == 165
    assert Counter(wa.environment_of(c) for c in configs) == {"shopping": 46, "reddit": 21, "shopping_admin": 35,
                                                              "gitlab": 32, "map": 31}
    assert Counter(wa.site_key(c) for c in configs)["multi"] == 10
    by_id = {c["old_task_id"]: c for c in configs}
    assert wa.environment_of(by_id[268]) == "map"                  # ['wikipedia', 'map']
    assert wa.environment_of(by_id[682]) == "reddit"               # ['reddit', 'gitlab']
    assert wa.environment_of(by_id[760]) == "map"                  # ['map', 'shopping_admin']


def _rows():
    def row(site, env, ok, evaluated=True):
        return {"site": site, "environment": env, "evaluated": evaluated, "success": ok,
                "termination": "answered" if evaluated else "env_error"}
    return [row("shopping", "shopping", True), row("shopping", "shopping", False), row("multi", "reddit", True),
            row("reddit", "reddit", False), row("multi", "map", False), row("map", "map", True, evaluated=False)]


def test_summary_per_environment_and_site_groups_multi_keeps_the_old_table():
    paper = wa.summarize_run(_rows())
    assert list(paper["per_environment"]) == ["shopping", "reddit", "map"]
    assert {e: (v["tasks"], v["success_rate"]) for e, v in paper["per_environment"].items()} == {
        "shopping": (2, 0.5), "reddit": (2, 0.5), "map": (2, 0.0)}
    assert paper["sites"] == paper["per_environment"] and paper["site_groups"] == "paper"
    assert paper["macro"]["success_rate"] == pytest.approx(1 / 3) and "multi" not in paper["sites"]
    multi = wa.summarize_run(_rows(), site_groups="multi")
    assert set(multi["sites"]) == {"shopping", "reddit", "multi", "map"} and multi["sites"]["multi"]["tasks"] == 2
    assert multi["per_environment"] == paper["per_environment"] and multi["site_groups"] == "multi"
    assert multi["macro"]["success_rate"] == pytest.approx((0.5 + 0 + 0.5 + 0) / 4)
    assert parse_config(WEBARENA_LITE, BASE + ["--site-groups", "multi"]).site_groups == "multi"
    with pytest.raises(SystemExit):
        parse_config(WEBARENA_LITE, BASE + ["--site-groups", "six"])
    # rows written before 'environment' existed fall back to their site
    old = [{k: v for k, v in r.items() if k != "environment"} for r in _rows()]
    assert set(wa.summarize_run(old)["per_environment"]) == {"shopping", "reddit", "multi", "map"}


def test_result_rows_name_the_environment(monkeypatch):
    from search.loop import EpisodeResult

    task = next(c for c in wa.load_task_configs() if c["old_task_id"] == 268)
    row = WEBARENA_LITE.row(parse_config(WEBARENA_LITE, BASE), task, EpisodeResult("answered", 1.0, True))
    assert (row["site"], row["environment"]) == ("multi", "map")


# -- progress ----------------------------------------------------------------------------------

def test_a_search_run_shows_episode_and_step_progress_and_ends_with_a_summary_line(tmp_path, monkeypatch, capsys):
    """Real run_task and runner wiring; the episode loop and the harness are faked (no browser)."""
    import search.demo_site
    from search.agent import AXTreeStep
    from search.loop import EpisodeResult

    def fake_episode(harness, agent, execute, max_steps, seed, max_format_errors, on_step, reset, result_class):
        result = EpisodeResult("answered", 1.0, True)
        for t in range(3):
            time.sleep(0.6)                             # past the bar's redraw interval on a terminal
            step = AXTreeStep(t, "http://x/", [], None, f"click('{t}')")
            result.steps.append(step)
            on_step(step, SimpleNamespace(url="http://x/"))
        return result

    monkeypatch.setattr(episodes, "load_models", lambda benchmark, config: (None, None))
    monkeypatch.setattr(episodes, "run_episode", fake_episode)
    monkeypatch.setattr(search.demo_site, "demo_harness",
                        lambda shop, **kw: (lambda task: contextlib.nullcontext(SimpleNamespace())))
    monkeypatch.setattr(wa, "WEBARENA_LITE", replace(WEBARENA_LITE, trajectory_site=None))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)     # a terminal: redrawn every 0.5 s (a log: 30 s)
    assert wa.main(BASE + ["--demo", "--out", str(tmp_path / "o"), "--max-steps", "5"]) == 0
    err = capsys.readouterr().err
    assert "search.webarena episodes: 100%" in err and "1/1" in err and ("episode/s" in err or "s/episode" in err)
    assert "steps:" in err and "3/5" in err                                # the step bar of the task, with its ETA
    assert "<" in err                                                       # tqdm's elapsed<remaining
    last = err.strip().splitlines()[-1]
    assert last.startswith("search.webarena: done: 1 task(s) run, macro success 1.000, 0 environment failure(s), "
                           "3 step(s) in ") and last.endswith(f"summary in {tmp_path / 'o' / 'summary.json'}")
