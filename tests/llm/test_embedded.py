"""The embedded small model that `make setup` prepares loads as a plain transformers folder."""

import json

import pytest

from conftest import EMBEDDED_MODEL


@pytest.mark.slow
def test_embedded_model_loads_and_generates():
    if not (EMBEDDED_MODEL / "config.json").exists():
        pytest.skip("embedded model missing: run `make setup`")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    model = AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL, dtype=torch.float32)
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    prompt = tok.apply_chat_template([{"role": "user", "content": "Say hello."}],
                                     add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert text.strip()
    assert "Apache-2.0" in json.loads((EMBEDDED_MODEL / "PROVENANCE.json").read_text())["license"]
