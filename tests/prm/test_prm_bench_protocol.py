"""prm.evaluate as the paper evaluates WebPRMBench: Mind2Web left out of the macro, states grouped by
(source, state), the GMCP partition read from the prompts, truncated judgments counted apart, and
a full-judgment default length for endpoint judges. A small bench with hand-computed answers."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.state import State
from judgment.format import render_pair
from llm.serve import serve_in_thread
from prm.evaluate import compare, evaluate, load_bench, main, markdown, pair_structure, split_sources
from prm.judge import Judgment

AXTREE = ("[1] RootWebArea 'Shop'\n\t[12] button 'Order'\n\t[40] link 'Home'\n\t[41] textbox 'Search'\n"
          "\t[7] link 'Deal'\n\t[7] link 'Deal'")


def squeezed(table: str) -> str:
    """A Markdown table with its column padding (``DataFrame.to_markdown``) squeezed to one space."""
    return re.sub(r" {2,}", " ", table)


def webarbiter_prompt(hint: str, r1: str, r2: str) -> str:
    """A prompt as WebPRMBench writes it: one string, responses with a thought before ACTION:."""
    return (f"#### Intent ####\nOrder an iPad {hint}\n\n#### AXTREE ####\nNote: [bid] is the element id.\n{AXTREE}\n\n"
            "#### Trajectory ####\nStep 1: ACTION: click('40')\n\n#### start url ####\nhttp://shop/\n\n"
            "#### current url ####\nhttp://shop/ipad\n\n#### Assistant Responses ####\n"
            f"[The Begin of Response 1]\nTHOUGHT: I should act.\nACTION: {r1}\n[The End of Response 1]\n\n"
            f"[The Begin of Response 2]\nTHOUGHT: Maybe this.\nACTION: {r2}\n[The End of Response 2]\n\n"
            "Answer with <Answer>Response 1</Answer> or <Answer>Response 2</Answer>.")


def project_prompt(hint: str, r1: str, r2: str) -> list[dict]:
    """A prompt as this project's export writes it: chat messages (judgment.format.render_pair)."""
    state = State(intent=f"Order an iPad {hint}", axtree=AXTREE, url="http://shop/ipad", start_url="http://shop/")
    return render_pair(state, r1, r2)[0]


# (source, state_idx, pair_idx, expected, judge's hint, response 1, response 2, prompt builder)
# hints: say1/say2 = that verdict, trunc = cut at the length limit, garble = no answer.
BENCH = [
    ("WebArena", 0, 0, 1, "say1", "click('12')", "click('40')", webarbiter_prompt),               # GMCP, right
    ("WebArena", 0, 1, 2, "say2", "click('40')", "click('12') # the order button", webarbiter_prompt),  # GMCP, right
    ("WebArena", 1, 0, 1, "say2", "fill('41', 'ipad')", "click('40')", webarbiter_prompt),        # ops differ, wrong
    ("WebArena", 1, 1, 1, "say1", "click('12')", "scroll(0, 200)", webarbiter_prompt),             # no element, right
    ("WorkArena", 0, 0, 1, "say1", "click('12')", "click('99')", webarbiter_prompt),               # 99 absent, right
    ("WorkArena", 1, 0, 2, "trunc", "click('7')", "click('12')", webarbiter_prompt),               # 7 twice, truncated
    ("WorkArena", 1, 1, 1, "say1", None, None, None),                                              # no structure, right
    ("AssistantBench", 0, 0, 1, "say1", "click('12')", "click('41')", project_prompt),             # GMCP, right
    ("AssistantBench", 0, 1, 2, "say2", "I would rather wait", "click('12')", project_prompt),     # no action, right
    ("Mind2Web_test_task", 0, 0, 1, "say2", "click('12')", "click('40')", webarbiter_prompt),      # GMCP, wrong
    ("Mind2Web_test_task", 1, 0, 1, "garble", "click('12')", "click('40')", webarbiter_prompt),    # GMCP, unparsed
]


def write_bench(path, as_messages: bool = False):
    rows = []
    for src, state, pair, expected, hint, r1, r2, build in BENCH:
        prompt = build(f"[[{hint}]]", r1, r2) if build else f"Which is better, A or B? [[{hint}]]"
        if as_messages and isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        if not as_messages and not isinstance(prompt, str):
            prompt = "\n\n".join(m["content"] for m in prompt)
        rows.append({"state_idx": state, "pair_idx": pair, "expected": expected, "prompt": prompt, "source_name": src})
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class HintJudge:
    """Answers what the prompt's [[hint]] says."""

    def judge_prompts(self, prompts):
        out = []
        for p in prompts:
            hint = re.search(r"\[\[(\w+)\]\]", "\n".join(m["content"] for m in p)).group(1)
            if hint.startswith("say"):
                out.append(Judgment(f"<think>...</think>\n<Answer>Response {hint[-1]}</Answer>", int(hint[-1])))
            elif hint == "trunc":
                out.append(Judgment("<think>Response 1 clicks a deal, while Response 2", None, truncated=True))
            else:
                out.append(Judgment("Both are fine.", None))
        return out


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return load_bench(write_bench(tmp_path_factory.mktemp("b") / "bench.parquet"))


def test_mind2web_left_out_of_the_macro_by_default(rows):
    m, records = evaluate(HintJudge(), rows)
    assert m["excluded_sources"] == ["Mind2Web_test_task"]
    assert m["macro_sources"] == ["AssistantBench", "WebArena", "WorkArena"]
    src = m["by_source"]
    assert (src["WebArena"]["pairwise"], src["WebArena"]["bon"]) == (0.75, 0.5)
    assert (src["WorkArena"]["pairwise"], src["WorkArena"]["bon"]) == (pytest.approx(2 / 3), 0.5)
    assert (src["AssistantBench"]["pairwise"], src["AssistantBench"]["bon"]) == (1.0, 1.0)
    # still judged and reported on its own
    assert src["Mind2Web_test_task"]["pairs"] == 2 and src["Mind2Web_test_task"]["pairwise"] == 0.0
    assert src["Mind2Web_test_task"]["in_macro"] is False and src["WebArena"]["in_macro"] is True
    assert m["macro"]["pairwise"] == pytest.approx((0.75 + 2 / 3 + 1.0) / 3)
    assert m["macro"]["bon"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert len(records) == len(BENCH)

    back, _ = evaluate(HintJudge(), rows, include_sources=[])
    assert back["excluded_sources"] == [] and back["by_source"]["Mind2Web_test_task"]["in_macro"] is True
    assert back["macro"]["pairwise"] == pytest.approx((0.75 + 2 / 3 + 1.0 + 0.0) / 4)
    assert back["macro"]["bon"] == pytest.approx((0.5 + 0.5 + 1.0 + 0.0) / 4)
    named, _ = evaluate(HintJudge(), rows, include_sources=["MIND2WEB_test"])
    assert named["macro"] == back["macro"]


def test_sources_are_matched_case_insensitively():
    assert split_sources(["mind2web", "Mind2Web_cross_site", "webarena"]) == (["webarena"],
                                                                              ["mind2web", "Mind2Web_cross_site"])
    assert split_sources(["mind2web", "Mind2Web_cross_site"], ["cross"]) == (["Mind2Web_cross_site"], ["mind2web"])


def test_states_are_grouped_by_source_and_state(rows):
    m, _ = evaluate(HintJudge(), rows)
    # pooled over the three sources: 9 pairs, 7 right; 5 states (state_idx 0 and 1 repeat across
    # sources), 3 of them right. Grouped by state_idx alone there would be 2 states, 1 right.
    o = m["overall"]
    assert (o["pairs"], o["correct"], o["states"], o["states_correct"]) == (9, 7, 5, 3)
    assert o["bon"] == pytest.approx(0.6)
    first_two = load_bench(write_bench(rows_path := _tmp_bench()), limit_states=2)
    assert {(r["source_name"], r["state"]) for r in first_two} == {("WebArena", 0), ("WebArena", 1)}
    rows_path.unlink()


def _tmp_bench():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp()) / "bench.parquet"


def test_truncated_judgments_are_their_own_counted_outcome(rows):
    m, records = evaluate(HintJudge(), rows)
    assert m["truncated"] == 1 and m["unparsed"] == 1         # kept apart
    woa = m["by_source"]["WorkArena"]
    assert woa["truncated"] == 1 and woa["unparsed"] == 0 and woa["truncated_share"] == pytest.approx(1 / 3)
    assert m["by_source"]["Mind2Web_test_task"]["unparsed"] == 1
    assert m["macro"]["truncated_share"] == pytest.approx((0 + 1 / 3 + 0) / 3)
    assert m["overall"]["truncated"] == 1 and m["overall"]["unparsed"] == 0
    trunc = [r for r in records if r["truncated"]]
    assert len(trunc) == 1 and trunc[0]["source_name"] == "WorkArena" and trunc[0]["correct"] is False
    table = markdown({"name": "x", **m})
    assert "| WorkArena | 66.67 | 50.00 | 3 | 2 | 0 | 1 |" in squeezed(table)
    sep = next(line for line in table.splitlines() if line.startswith("|:"))     # group left, figures right
    assert [c[0] + c[-1] for c in sep.strip("|").split("|")] == [":-"] + ["-:"] * 8    # the intervals too


def test_gmcp_partition_of_benchmark_pairs(rows):
    assert [r["bench_gmcp"] for r in rows] == ["gmcp", "gmcp", "non_gmcp", "non_gmcp", "non_gmcp", "non_gmcp", None,
                                               "gmcp", None, "gmcp", "gmcp"]
    m, _ = evaluate(HintJudge(), rows)
    part = m["gmcp_partition"]
    assert part["pairs"] == 9 and part["gmcp"]["pairs"] == 3 and part["non_gmcp"]["pairs"] == 4
    assert (part["gmcp"]["pairwise"], part["gmcp"]["bon"], part["gmcp"]["states"]) == (1.0, 1.0, 2)
    assert (part["non_gmcp"]["pairwise"], part["non_gmcp"]["states"]) == (0.5, 3)
    assert part["non_gmcp"]["bon"] == pytest.approx(1 / 3) and part["non_gmcp"]["truncated"] == 1
    assert part["gmcp_share"] == pytest.approx(3 / 7)
    assert part["unparseable"] == {"prompt": 1, "action": 1}
    assert part["non_gmcp_why"] == {"different ops": 1, "not a page-element action": 1,
                                     "target not in the AXTree": 1, "target not unique in the AXTree": 1}
    # Mind2Web's two GMCP pairs (one wrong, one unparsed) join the pool when it is brought back
    back, _ = evaluate(HintJudge(), rows, include_sources=[])
    assert back["gmcp_partition"]["gmcp"]["pairs"] == 5 and back["gmcp_partition"]["gmcp"]["pairwise"] == 0.6


def test_prompts_as_strings_or_messages_read_the_same(tmp_path):
    as_text = load_bench(write_bench(tmp_path / "a.parquet"))
    as_msgs = load_bench(write_bench(tmp_path / "b.parquet", as_messages=True))
    assert [r["bench_gmcp_why"] for r in as_text] == [r["bench_gmcp_why"] for r in as_msgs]


def test_pair_structure_reads_each_response_with_data_actions_extractor():
    """The GMCP partition reads a response's action the way data.actions.extract_action does: a
    fenced block or text around the call is tolerated; an unreadable prompt says so."""
    fenced = webarbiter_prompt("", "```python\nclick('12')\n```", "not click('12') but click('40')")
    assert pair_structure(fenced) == ("gmcp", "same op on page elements")
    assert pair_structure(webarbiter_prompt("", "click('12')", "I would rather wait")) == (None, "action")
    assert pair_structure([{"role": "user", "content": "A or B?"}]) == (None, "prompt")


def _complete(seen):
    def complete(payload):
        seen.append(payload.get("max_tokens"))
        user = payload["messages"][-1]["content"]
        hint = re.search(r"\[\[(\w+)\]\]", user).group(1)
        text, reason = ((f"<Answer>Response {hint[-1]}</Answer>", "stop") if hint.startswith("say") else
                        ("<think>Response 1 clicks", "length") if hint == "trunc" else ("no idea", "stop"))
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return complete


def test_cli_endpoint_default_length_truncation_and_json_keys(tmp_path, capsys):
    bench = write_bench(tmp_path / "bench.parquet")
    seen: list = []
    server = serve_in_thread(_complete(seen), "scripted-prm")
    try:
        common = ["--model", "scripted-prm", "--base-url", server.base_url, "--cache-dir", str(tmp_path / "cache"),
                  "--max-retries", "0", "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--bench", str(bench)]
        assert main([*common, "--out", str(tmp_path / "a.json"), "--name", "A"]) == 0
        assert set(seen) == {1024}                              # a full judgment fits by default
        seen.clear()
        assert main([*common, "--out", str(tmp_path / "b.json"), "--name", "B", "--max-tokens", "24",
                     "--include-sources"]) == 0
        assert set(seen) == {24}                                # an explicit length is kept
    finally:
        server.shutdown()
    a = json.loads((tmp_path / "a.json").read_text())
    assert {"pairwise", "bon"} <= set(a["macro"]) and a["protocol"]["max_tokens"] == 1024
    assert {"pairwise", "bon"} <= set(a["by_source"]["WebArena"])
    assert a["macro"]["pairwise"] == pytest.approx((0.75 + 2 / 3 + 1.0) / 3)
    assert a["truncated"] == 1 and a["by_source"]["WorkArena"]["truncated"] == 1 and a["unparsed"] == 1
    assert "Not in the macro" in (tmp_path / "a.md").read_text()
    b = json.loads((tmp_path / "b.json").read_text())
    assert b["excluded_sources"] == [] and b["protocol"]["include_sources"] == []
    table = squeezed(compare([a, b]))
    assert "| Mind2Web_test_task (not in macro) | 0.00 | 0.00 | 0.00 | 0.00 |" in table
    assert "| pooled GMCP pairs | 100.00 | 100.00 | 60.00 |" in table


def test_cli_prompt_template_rerenders_the_benchmarks_prompts(tmp_path):
    """``--prompt-template``: every prompt with the benchmark's structure reaches the judge in the
    user's text; the one without it is judged as given and counted."""
    bench = write_bench(tmp_path / "bench.parquet")
    template = tmp_path / "t.yaml"
    template.write_text("system: TEMPLATE SYSTEM\nuser: 'GOAL {intent} / A {action1} / B {action2}'\n")
    users: list = []

    def complete(payload):
        users.append((payload["messages"][0]["content"], payload["messages"][-1]["content"]))
        return _complete([])(payload)

    server = serve_in_thread(complete, "scripted-prm")
    try:
        assert main(["--model", "scripted-prm", "--base-url", server.base_url, "--cache-dir", str(tmp_path / "c"),
                     "--max-retries", "0", "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--bench", str(bench),
                     "--out", str(tmp_path / "t.json"), "--include-sources", "--prompt-template", str(template)]) == 0
    finally:
        server.shutdown()
    templated = [u for s, u in users if s == "TEMPLATE SYSTEM"]
    assert len(templated) == len(BENCH) - 1 and len(users) == len(BENCH)
    assert "GOAL Order an iPad [[say1]] / A click('12') / B click('40')" in templated
    result = json.loads((tmp_path / "t.json").read_text())
    assert result["protocol"]["prompts_not_rerendered"] == 1
    assert result["protocol"]["prompt_format"]["format"] == "template"
