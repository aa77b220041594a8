"""prm.judge reads realistic outputs and applies the both-order rule; prm.evaluate's metrics on
hand-made fixtures, and end to end against a scripted OpenAI-protocol server."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.state import State
from dataset.export import MESSAGE
from judgment.format import render_pair
from judgment.parse import parse_prompt
from llm import LLMConfig
from llm.serve import serve_in_thread
from prm.evaluate import compare, load_bench, main, score
from prm.judge import EndpointJudge, Judgment, LocalJudge, PairOutcome, judge, judge_expected, swap_responses


def squeezed(table: str) -> str:
    """A Markdown table with its column padding (``DataFrame.to_markdown``) squeezed to one space."""
    return re.sub(r" {2,}", " ", table)


STATE = State(intent="Order an iPad", axtree="[1] RootWebArea 'Shop'\n\t[12] button 'Order'\n\t[40] link 'Home'",
              url="http://shop/ipad")
REALISTIC = {
    "analysis": "Response 1 goes home, which is a detour. Response 2 orders, as the intent asks.\n"
                "<Answer>Response 2</Answer>",
    "echo_then_tag": "Answer with <Answer>Response 1</Answer> or <Answer>Response 2</Answer>.\n"
                     "Response 1 clicks Order.\n<Answer>Response 1</Answer>",
    "phrase": "After weighing both, Response 1 is better because it advances the task.",
    "undecided": "Both responses have merits; it depends on the user.",
    "restates": "The evaluation criteria are:\n\n1. Task progress: which action moves the agent",
    "cut": "<think>Response 1 goes home, while Response 2",          # stopped at the length limit
}


def _complete(answer_for):
    def complete(payload):
        text = answer_for(payload["messages"][-1]["content"])
        text, reason = text if isinstance(text, tuple) else (text, "stop")
        return {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return complete


def _llm(server, tmp_path) -> LLMConfig:
    return LLMConfig(base_url=server.base_url, model="scripted", cache_dir=str(tmp_path / "cache"), max_retries=0,
                     api_key_env="SURFPRM_TEST_KEY_UNSET")


def _picks_order(user: str) -> str:
    """A judge that knows click('12') is right, whatever its position."""
    pos = 1 if parse_prompt(user).response_1 == "click('12')" else 2
    return f"Response 1 and Response 2 differ.\n<Answer>Response {pos}</Answer>"


def test_endpoint_judge_parses_realistic_outputs(tmp_path):
    keys = list(REALISTIC)
    def answer(user):
        key = keys[int(user.split("case=")[1][0])]
        return (REALISTIC[key], "length") if key == "cut" else REALISTIC[key]
    server = serve_in_thread(_complete(answer), "scripted")
    try:
        j = EndpointJudge(_llm(server, tmp_path))
        got = j.judge_prompts([[{"role": "user", "content": f"case={i}"}] for i in range(len(keys))])
    finally:
        server.shutdown()
    # valid = ends in exactly one answer tag (judgment.parse.parse_verdict): an echoed template with
    # two tags, a phrase without a tag and a restatement are unparsed; the cut one is truncated
    assert [g.verdict for g in got] == [2, None, None, None, None, None]
    assert [g.truncated for g in got] == [False] * 5 + [True]
    assert got[0].text == REALISTIC["analysis"] and all(g.infra_error is None for g in got)


def test_swap_and_the_both_orders_rule(tmp_path):
    msgs, _ = render_pair(STATE, "click('40')", "click('12')")
    swapped = swap_responses(msgs)
    assert swapped[0] == msgs[0] and parse_prompt(swapped).response_1 == "click('12')"
    assert parse_prompt(swapped).response_2 == "click('40')"
    assert swap_responses(swapped) == msgs and swap_responses([{"role": "user", "content": "A or B?"}]) is None
    # a judge that always says "1" is position-biased: wrong under the both-order rule
    assert not PairOutcome(1, Judgment("", 1), Judgment("", 1)).correct
    assert PairOutcome(1, Judgment("", 1), Judgment("", 1)).position_biased
    assert PairOutcome(2, Judgment("", 2), Judgment("", 1)).correct
    assert PairOutcome(2, Judgment("", 2)).correct and PairOutcome(2, Judgment("", None)).unparsed
    server = serve_in_thread(_complete(_picks_order), "scripted")
    try:
        j = EndpointJudge(_llm(server, tmp_path))
        assert judge(j, STATE, "click('40')", "click('12')").verdict == 2
        outs = judge_expected(j, [msgs, msgs], [2, 1], both_orders=True)
    finally:
        server.shutdown()
    assert [o.correct for o in outs] == [True, False] and [o.swapped.verdict for o in outs] == [1, 1]


def _tiny_judge_inputs():
    from tiny_lm import tiny_lm

    msgs = [render_pair(STATE, a, b)[0] for a, b in [("click('40')", "click('12')"), ("click('12')", "go_back()")]]
    model, tok = tiny_lm([m["content"] for p in msgs for m in p] + ["<Answer>Response 1</Answer>"])
    return msgs, model, tok


def test_local_judge_batches_a_tiny_model():
    msgs, model, tok = _tiny_judge_inputs()
    j = LocalJudge(model, tok, max_tokens=5, batch_size=2, shared_prefill=False)    # an accelerator's path
    got = j.judge_prompts(msgs + msgs[:1])
    assert len(got) == 3 and all(isinstance(g.text, str) and g.verdict in (1, 2, None) for g in got)
    assert got[0].text == got[2].text          # greedy, and batching (left padding) does not change it


def test_local_judge_on_a_cpu_prefills_a_shared_state_once_with_plain_generates_answers():
    import torch

    msgs, model, tok = _tiny_judge_inputs()
    j = LocalJudge(model, tok, max_tokens=5)            # on a CPU: one prompt at a time, prefixes shared
    ids = [tok.apply_chat_template(m, add_generation_prompt=True, return_dict=True)["input_ids"] for m in msgs]
    common = next(k for k in range(min(map(len, ids))) if ids[0][k] != ids[1][k])
    ran = []
    hook = model.register_forward_pre_hook(lambda m, args, kw: ran.append(kw["input_ids"].numel()), with_kwargs=True)
    try:
        got = j.generate(msgs)
    finally:
        hook.remove()
    # each prompt up to where they part runs once; then each prompt's own tokens and its decoding steps
    assert sum(ran) <= sum(map(len, ids)) - common + 2 * 5 and common > 20
    for m, (text, _) in zip(msgs, got):
        inputs = tok.apply_chat_template(m, add_generation_prompt=True, return_dict=True, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
        row = out[0, inputs["input_ids"].shape[1]:].tolist()
        stop = next((k for k, t in enumerate(row) if t == tok.eos_token_id), None)
        assert text == tok.decode(row[:stop], skip_special_tokens=True)


def _fixture_rows():
    # source a: state 0 (2 pairs, both right), state 1 (2 pairs, one wrong); source b: state 2 (1 pair, right)
    rows = [{"state": s, "source_name": src, "rule": rule, "axis": "spatial", "gmcp": g}
            for s, src, rule, g in [(0, "a", "repeat_past", "gmcp"), (0, "a", "structurally_near", "gmcp"),
                                    (1, "a", "repeat_past", "non_gmcp"), (1, "a", "repeat_past", "gmcp"),
                                    (2, "b", "structurally_near", "gmcp")]]
    return rows, [True, True, True, False, True]


def test_metrics_on_hand_made_fixtures():
    rows, correct = _fixture_rows()
    m = score(rows, correct, [False, False, False, True, False])
    assert m["by_source"]["a"]["pairwise"] == 0.75 and m["by_source"]["a"]["bon"] == 0.5   # state 1 has a wrong pair
    assert m["by_source"]["b"]["pairwise"] == 1.0 and m["by_source"]["b"]["bon"] == 1.0
    assert (m["macro"]["pairwise"], m["macro"]["bon"]) == (pytest.approx(0.875), pytest.approx(0.75))
    assert m["overall"]["pairwise"] == 0.8 and m["overall"]["states_correct"] == 2 and m["unparsed"] == 1
    assert m["by_rule"]["repeat_past"]["pairwise"] == pytest.approx(2 / 3)
    assert m["by_gmcp"]["non_gmcp"]["pairwise"] == 1.0 and m["by_gmcp"]["gmcp"]["pairwise"] == 0.75
    one_state = score(rows[2:4], [True, False])
    assert one_state["by_source"]["a"]["bon"] == 0.0 and one_state["by_source"]["a"]["pairwise"] == 0.5


def _bench(path, pairs):
    schema = pa.schema([("state_idx", pa.int32()), ("pair_idx", pa.int32()), ("expected", pa.int8()),
                        ("prompt", pa.list_(MESSAGE)), ("source_name", pa.string())])
    rows = []
    for state, pair, a1, a2, src in pairs:
        msgs, _ = render_pair(STATE, a1, a2)
        rows.append({"state_idx": state, "pair_idx": pair, "expected": 1 if a1 == "click('12')" else 2,
                     "prompt": msgs, "source_name": src})
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def test_evaluate_cli_against_a_scripted_endpoint(tmp_path, capsys):
    bench = tmp_path / "bench.parquet"
    _bench(bench, [(0, 0, "click('12')", "click('40')", "shopping"), (0, 1, "go_back()", "click('12')", "shopping"),
                   (1, 0, "click('12')", "scroll(0, 200)", "gitlab"), (2, 0, "click('40')", "click('12')", "gitlab")])
    # the scripted judge is right except on the last pair (it answers without a tag there)
    def answer(user):
        return "no idea" if parse_prompt(user).response_1 == "click('40')" else _picks_order(user)
    server = serve_in_thread(_complete(answer), "scripted-prm")
    try:
        common = ["--base-url", server.base_url, "--cache-dir", str(tmp_path / "cache"), "--max-retries", "0",
                  "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--bench", str(bench)]
        assert main(["--model", "scripted-prm", *common, "--out", str(tmp_path / "a.json"), "--name", "A"]) == 0
        assert main(["--model", "scripted-prm", *common, "--out", str(tmp_path / "b.json"), "--name", "B",
                     "--both-orders"]) == 0
    finally:
        server.shutdown()
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["by_source"]["shopping"]["pairwise"] == 1.0 and a["by_source"]["shopping"]["bon"] == 1.0
    assert a["by_source"]["gitlab"]["pairwise"] == 0.5 and a["by_source"]["gitlab"]["bon"] == 0.5
    assert (a["macro"]["pairwise"], a["macro"]["bon"]) == (0.75, 0.75) and a["unparsed"] == 1
    assert a["overall"]["pairs"] == 4 and a["truncated"] == 0 and a["excluded_sources"] == []
    assert "| **macro (over sources)** | **75.00** | **75.00** |" in squeezed((tmp_path / "a.md").read_text())
    assert len((tmp_path / "a.pairs.jsonl").read_text().splitlines()) == 4
    b = json.loads((tmp_path / "b.json").read_text())
    assert b["position"]["judged_both_orders"] == 4 and b["position"]["position_biased"] == 0
    capsys.readouterr()
    assert main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    table = squeezed(capsys.readouterr().out)
    assert "| group | A pairwise % | A best-of-N % | B pairwise % | B best-of-N % |" in table
    # both orders: the swapped (0, 0) puts click('40') first, where the judge answers no tag: wrong
    assert "| shopping | 100.00 | 100.00 | 50.00 | 0.00 |" in table and b["unparsed"] == 2


def test_trl_split_is_grouped_by_state_and_joined_to_candidates(tmp_path):
    from dataset.export import export_trl_labels
    from scripted_teacher import make_run

    make_run(tmp_path, n_pairs=6)
    paths = export_trl_labels(tmp_path, axtree_chars=300)
    rows = load_bench(paths["train"]) + load_bench(paths["test"])
    assert len(rows) == 6 and all(r["gmcp"] == "gmcp" and r["rule"] and r["expected"] in (1, 2) for r in rows)
    assert {r["source_name"] for r in rows} == {"surfprm/servicenow"}
    empty = {"name": "x", "by_source": {}, "macro": {"pairwise": None, "bon": None}}
    assert squeezed(compare([empty])).count("| - |") == 0


def test_placement_auto_is_bfloat16_on_a_gpu_and_float32_on_the_cpu(monkeypatch):
    import torch

    from prm.judge import placement

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert placement() == ("cpu", "float32") and placement("cpu", "bfloat16") == ("cpu", "bfloat16")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        placement("cuda")
    with pytest.raises(ValueError, match="dtype one of"):
        placement("cpu", "float16")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert placement() == ("cuda", "bfloat16") and placement("auto", "float32") == ("cuda", "float32")
    assert placement("cpu") == ("cpu", "float32")


def test_generate_mode_gets_1024_tokens_unless_given():
    from prm.judge import GENERATE_MAX_TOKENS, generate_max_tokens

    local, endpoint = LLMConfig(), LLMConfig(base_url="http://gpu:8000/v1", model="m")
    assert GENERATE_MAX_TOKENS == 1024
    assert generate_max_tokens(local, "generate", given=False).max_tokens == 1024
    assert generate_max_tokens(endpoint, "generate", given=False).max_tokens == 1024
    assert generate_max_tokens(local, "score-both", given=False).max_tokens == local.max_tokens    # scoring: no text
    assert generate_max_tokens(LLMConfig(max_tokens=24), "generate", given=True).max_tokens == 24


def test_evaluate_loads_a_local_judge_where_and_as_told(tmp_path):
    """--device/--dtype (prm.judge.placement) load a local folder; the result's protocol records
    what it ran in; a local judge in generate mode gets 1,024 tokens unless --max-tokens is given."""
    from tiny_lm import save_tiny_lm

    bench = tmp_path / "bench.parquet"
    _bench(bench, [(0, 0, "click('12')", "click('40')", "shopping")])
    texts = [m["content"] for m in render_pair(STATE, "click('12')", "click('40')")[0]]
    folder = save_tiny_lm(texts + ["<Answer>Response 1</Answer>"], tmp_path / "judge")
    common = ["--model", folder, "--bench", str(bench), "--cache-dir", str(tmp_path / "cache")]
    assert main([*common, "--out", str(tmp_path / "bf16.json"), "--judge-mode", "score", "--device", "cpu",
                 "--dtype", "bfloat16"]) == 0
    bf16 = json.loads((tmp_path / "bf16.json").read_text())["protocol"]
    assert (bf16["device"], bf16["dtype"], bf16["max_tokens"]) == ("cpu", "bfloat16", LLMConfig.max_tokens)
    assert main([*common, "--out", str(tmp_path / "gen.json"), "--max-tokens", "3"]) == 0
    gen = json.loads((tmp_path / "gen.json").read_text())["protocol"]
    assert (gen["device"], gen["dtype"], gen["max_tokens"]) == ("cpu", "float32", 3)     # auto on a CPU machine
    import argparse

    from prm.evaluate import EvaluateOptions, judge_config

    ap = argparse.ArgumentParser()
    EvaluateOptions.add_args(ap)
    LLMConfig.add_args(ap)
    assert judge_config(ap.parse_args(["--model", folder]), judge_mode="generate").max_tokens == 1024
    assert judge_config(ap.parse_args(["--model", folder]), judge_mode="score").max_tokens == LLMConfig.max_tokens
    with pytest.raises(SystemExit):
        ap.parse_args(["--device", "tpu"])
