"""The embedded SmolLM2 trains a LoRA step on demo data (label-only export of real steps) and is
evaluated end to end, through the train-prm and evaluate-prm flows. (A step of ~1,000 tokens is
~25 s on one core here; multi-step training and its loss log are tests/prm/test_prm_train.py's, on a
tiny model.)"""

from __future__ import annotations

import json

import pytest

from conftest import EMBEDDED_MODEL


@pytest.mark.slow
def test_embedded_smollm2_trains_a_step_and_evaluates(prefect_harness, tmp_path):
    if not (EMBEDDED_MODEL / "config.json").exists():
        pytest.skip(f"embedded model not prepared at {EMBEDDED_MODEL} (make setup)")
    from dataset.export import export_trl_labels
    from flows.prm import evaluate_prm_flow, train_prm_flow
    from scripted_teacher import make_run

    make_run(tmp_path, n_pairs=6)
    paths = export_trl_labels(tmp_path, axtree_chars=200)
    out = tmp_path / "prm"
    record = train_prm_flow(config="configs/prm/cpu-demo.yaml", overrides={
        "data": {"train_file": str(paths["train"]), "max_length": 1536},
        "train": {"output_dir": str(out), "max_steps": 1}})
    assert record["global_step"] == 1 and len(record["losses"]) == 1 and record["rows_dropped_too_long"] == 0
    assert (out / "model.safetensors").exists() and (out / "chat_template.jinja").exists()
    from llm import LLMConfig

    # the judge's LLM cache in the test's folder, not the project's .cache/llm
    result = evaluate_prm_flow(llm=LLMConfig(cache_dir=str(tmp_path / "llm")), bench=str(paths["test"]),
                               out=str(tmp_path / "eval.json"), model=str(out), max_tokens=12)
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["macro"] == result["macro"] and saved["overall"]["pairs"] >= 1
    assert 0 <= saved["macro"]["pairwise"] <= 1 and 0 <= saved["macro"]["bon"] <= 1
    assert set(saved["by_source"]) == {"surfprm/servicenow"} and (tmp_path / "eval.md").exists()
