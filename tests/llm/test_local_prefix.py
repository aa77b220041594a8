"""``LocalModel`` prefills a prompt once: the next request runs only from where its prompt leaves the
kept one, and n samples start from one prefill, with the answers of transformers' plain generate."""

from pathlib import Path

import pytest

from llm.local import LocalModel

WORDS = [f"w{i}" for i in range(200)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_lm import save_tiny_lm

    path = save_tiny_lm([" ".join(WORDS)] * 2, tmp_path_factory.mktemp("tiny") / "tiny-lm", seed=7)
    model = LocalModel(Path(path))
    model.model.generation_config.eos_token_id = None      # every answer runs to max_tokens
    model.eos_ids = {-1}
    return model


def _request(tail: str, **kw) -> dict:
    return {"messages": [{"role": "system", "content": " ".join(WORDS[:150])}, {"role": "user", "content": tail}],
            "max_tokens": 12, **kw}


def _plain(model: LocalModel, request: dict) -> list[str]:
    """The same request through a plain ``generate`` on the whole prompt (no kept cache)."""
    import torch

    req, inputs = model._prepare(request)
    kw = (dict(do_sample=False) if req["temperature"] == 0 else
          dict(do_sample=True, temperature=req["temperature"], top_p=req["top_p"], top_k=0,
               num_return_sequences=req["n"]))
    torch.manual_seed(req["seed"] or 0)
    with torch.inference_mode():
        out = model.model.generate(**inputs, max_new_tokens=req["max_tokens"], pad_token_id=0, **kw)
    return [model.tokenizer.decode(row, skip_special_tokens=True) for row in out[:, inputs["input_ids"].shape[1]:]]


def _texts(answer: dict) -> list[str]:
    return [c["message"]["content"] for c in answer["choices"]]


def test_a_shared_prefix_runs_once_and_answers_do_not_change(tiny):
    first = _request("w160 w161 w162", temperature=0)
    prompt_len = tiny.complete(first)["usage"]["prompt_tokens"]
    before = tiny.prefilled
    again = tiny.complete(first)
    assert tiny.prefilled == before                          # the same prompt: nothing prefilled again
    assert _texts(again) == _plain(tiny, first)
    other = _request("w170 w171", temperature=0)
    answer = tiny.complete(other)
    ran = tiny.prefilled - before
    assert 0 < ran < 10 < prompt_len                         # only the user turn that differs
    assert _texts(answer) == _plain(tiny, other)


def test_n_samples_start_from_one_prefill_with_plain_generates_samples(tiny):
    request = _request("w180 w181 w182 w183", temperature=1.0, n=3, seed=11)
    before = tiny.prefilled
    answer = tiny.complete(request)
    assert tiny.prefilled - before < answer["usage"]["prompt_tokens"]        # once, not three times
    assert _texts(answer) == _plain(tiny, request) and len(answer["choices"]) == 3
