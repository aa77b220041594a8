"""A local judge's answers are cached like the client's: a rerun of ``prm.evaluate`` with a local
folder loads no model and runs no forward pass, in every judge mode; a folder saved again (a
trained adapter, a retrained model) gets none of the old entries; ``--no-cache`` neither reads
nor writes."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.state import State
from dataset.export import MESSAGE
from judgment.format import render_pair
from prm.evaluate import main

STATE = State(intent="Buy the cheapest blue mug", url="http://shop.test/mugs",
              axtree="[1] RootWebArea 'Shop'\n\t[12] link 'Blue mug $4'\n\t[40] link 'Red mug $9'")
PAIRS = [("click('12')", "click('40')"), ("go_back()", "click('12')"), ("click('12')", "scroll(0, 200)")]


@pytest.fixture(scope="module")
def bench_and_folder(tmp_path_factory):
    from tiny_lm import save_tiny_lm

    root = tmp_path_factory.mktemp("judge_cache")
    rows, texts = [], ["<Answer>Response 1</Answer> <Answer>Response 2</Answer>"]
    for i, (a1, a2) in enumerate(PAIRS):
        msgs, _ = render_pair(STATE, a1, a2)
        texts += [m["content"] for m in msgs]
        rows.append({"state_idx": 0, "pair_idx": i, "expected": 1 if a1 == "click('12')" else 2,
                     "prompt": msgs, "source_name": "shopping"})
    schema = pa.schema([("state_idx", pa.int32()), ("pair_idx", pa.int32()), ("expected", pa.int8()),
                        ("prompt", pa.list_(MESSAGE)), ("source_name", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / "bench.parquet")
    return root / "bench.parquet", save_tiny_lm(texts, root / "judge"), texts


@pytest.fixture
def counted(monkeypatch):
    """{'loads': n, 'forward': n} over every model transformers loads from here on."""
    from transformers import AutoModelForCausalLM

    counts = {"loads": 0, "forward": 0}
    real = AutoModelForCausalLM.from_pretrained

    def from_pretrained(*args, **kwargs):
        model = real(*args, **kwargs)
        counts["loads"] += 1
        model.register_forward_hook(lambda *a: counts.__setitem__("forward", counts["forward"] + 1))
        return model
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)
    return counts


def _evaluate(bench, folder, out, mode, *extra):
    assert main(["--model", folder, "--bench", str(bench), "--out", str(out), "--judge-mode", mode,
                 "--max-tokens", "4", "--both-orders", *extra]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("mode", ["score", "score-both", "generate", "rationale"])
def test_rerun_loads_no_model_and_runs_no_forward_pass(bench_and_folder, tmp_path, counted, mode):
    bench, folder, _ = bench_and_folder
    cache = ["--cache-dir", str(tmp_path / "cache")]
    first = _evaluate(bench, folder, tmp_path / "a.json", mode, *cache)
    assert counted["loads"] == 1 and counted["forward"] >= len(PAIRS)
    counted.update(loads=0, forward=0)
    second = _evaluate(bench, folder, tmp_path / "b.json", mode, *cache)
    assert counted == {"loads": 0, "forward": 0}, "the rerun ran the model"
    assert (tmp_path / "a.pairs.jsonl").read_bytes() == (tmp_path / "b.pairs.jsonl").read_bytes()
    same = lambda r: {k: v for k, v in r.items() if k != "seconds"}    # noqa: E731 (the time differs)
    assert same(first) == same(second)
    assert first["protocol"]["device"] == "cpu" and first["protocol"]["dtype"] == "float32"


def test_modes_dtypes_and_retrained_folders_do_not_share_entries(bench_and_folder, tmp_path, counted):
    import shutil

    from tiny_lm import save_tiny_lm

    bench, folder, texts = bench_and_folder
    cache = ["--cache-dir", str(tmp_path / "cache")]
    _evaluate(bench, folder, tmp_path / "score.json", "score", *cache)
    n = len(list((tmp_path / "cache").rglob("*.json")))
    assert n == 2 * len(PAIRS)                                   # both orders, one entry each
    counted.update(loads=0, forward=0)
    _evaluate(bench, folder, tmp_path / "bf16.json", "score", *cache, "--dtype", "bfloat16")
    assert counted["forward"] > 0                                # another dtype: other entries
    # the same folder saved again (as training does): the old verdicts are not served
    copy = tmp_path / "judge"
    shutil.copytree(folder, copy)
    counted.update(loads=0, forward=0)
    _evaluate(bench, str(copy), tmp_path / "copy.json", "score", *cache)
    assert counted["forward"] > 0
    save_tiny_lm(texts, copy, seed=1)
    counted.update(loads=0, forward=0)
    _evaluate(bench, str(copy), tmp_path / "copy2.json", "score", *cache)
    assert counted["forward"] > 0, "a retrained folder was served its old weights' verdicts"
    counted.update(loads=0, forward=0)
    _evaluate(bench, folder, tmp_path / "none.json", "score", "--cache-dir", str(tmp_path / "other"), "--no-cache")
    assert counted["forward"] > 0 and not (tmp_path / "other").exists()


def test_model_fingerprint_follows_the_files(tmp_path):
    """The cache's name of a local model (teacher and judge alike) changes when its weights,
    config or tokenizer are written again, not when other files are; an adapter folder beside
    its base is another model."""
    import os

    from llm.scoring import local_model_id, model_fingerprint

    base = tmp_path / "base"
    base.mkdir()
    for name, data in (("config.json", b"{}"), ("model.safetensors", b"w" * 64), ("tokenizer.json", b"{}")):
        (base / name).write_bytes(data)
    first = model_fingerprint(base)
    (base / "README.md").write_text("notes")
    assert model_fingerprint(base) == first
    os.utime(base / "model.safetensors", ns=(1, 1))          # rewritten weights: another mtime
    assert model_fingerprint(base) != first
    second = model_fingerprint(base)
    (base / "tokenizer.json").write_bytes(b'{"x": 1}')
    assert model_fingerprint(base) != second
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "../base"}')
    (adapter / "adapter_model.safetensors").write_bytes(b"a" * 8)
    assert local_model_id(adapter) != local_model_id(base) and local_model_id(base).startswith("base@")
