"""One pipeline file for the whole job (``python -m flows.synthesize --config``): the shipped
example loads; its ``llm`` section is both models' unless ``fill_llm`` / ``teacher_llm`` override it;
flags override the file; a bad file is one line and exit 2; and the example runs on the bundled
sample against a scripted OpenAI-protocol endpoint that answers the fill values and the teacher."""

from __future__ import annotations

import json
import threading

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import ROOT

EXAMPLE = ROOT / "configs" / "pipeline.yaml"


def _settings(*argv):
    from flows.synthesize import build_parser, pipeline_settings

    args = build_parser().parse_args(list(argv))
    return pipeline_settings(args.config, args)


def test_the_example_loads_with_one_model_for_fills_and_teacher():
    p = _settings("--config", str(EXAMPLE))
    spec = yaml.safe_load(EXAMPLE.read_text())
    assert p.command.run == spec["run"] and p.command.input == spec["input"]
    assert p.fill_llm.base_url == p.teacher_llm.base_url == spec["llm"]["base_url"]
    assert p.fill_llm.model == p.teacher_llm.model == spec["llm"]["model"]
    assert (p.mine.sample_size, p.verify.k, p.export.format) == \
        (spec["mine"]["sample_size"], spec["verify"]["k"], spec["export"]["format"])


def test_sections_override_the_shared_model_and_flags_override_the_file(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"run": "r", "llm": {"base_url": "http://a/v1", "model": "big"},
                                    "fill_llm": {"model": "small"}, "teacher_llm": {"concurrency": 4},
                                    "mine": {"sample_size": 7}}))
    p = _settings("--config", str(path))
    assert (p.fill_llm.model, p.teacher_llm.model, p.fill_llm.base_url) == ("small", "big", "http://a/v1")
    assert (p.teacher_llm.concurrency, p.fill_llm.concurrency, p.mine.sample_size) == (4, 16, 7)
    # --base-url is both models'; --fill-* the fill model's alone; the teacher's --temperature is verify's
    p = _settings("--config", str(path), "--base-url", "http://b/v1", "--fill-model", "tiny", "--sample-size", "3",
                  "--temperature", "0.7", "--run", "other")
    assert (p.teacher_llm.base_url, p.fill_llm.base_url, p.fill_llm.model) == ("http://b/v1", "http://b/v1", "tiny")
    assert (p.mine.sample_size, p.command.run, p.verify.temperature, p.fill_llm.temperature) == (3, "other", 0.7, 0.0)
    # without any file: --base-url and --model are the fill model's too (the endpoint is given once)
    p = _settings("--run", "r", "--base-url", "http://c/v1", "--model", "m")
    assert (p.fill_llm.base_url, p.fill_llm.model) == ("http://c/v1", "m")
    assert _settings("--run", "r").fill_llm.is_local                 # no model given: the embedded one for both


@pytest.mark.parametrize("text, expected", [
    ("run: r\nllms: {}\n", "unknown settings ['llms']"),
    ("run: r\nmine: {sample_sise: 3}\n", "unknown settings ['sample_sise']"),
    ("run: r\nllm: [a]\n", "llm must be a mapping"),
])
def test_a_bad_pipeline_file_is_one_line_and_exit_2(tmp_path, capsys, text, expected):
    from flows.synthesize import main

    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_deployment_takes_the_file():
    from flows.synthesize import synthesize_flow

    assert synthesize_flow.validate_parameters({"config": "configs/pipeline.yaml"})["config"] == \
        "configs/pipeline.yaml"


class Endpoint:
    """A scripted OpenAI-protocol peer for fills and teacher: a fill value as JSON, or the answer tag
    ``Response 1`` to a judging prompt; counts what it was asked."""

    def __init__(self):
        self.asked = {"fill": 0, "judge": 0}
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> dict:
        judge = "judge two candidate" in request["messages"][0]["content"]
        with self.lock:
            self.asked["judge" if judge else "fill"] += 1
        text = "<Answer>Response 1</Answer>" if judge else '{"value": "Zoom"}'
        return {"id": "scripted", "object": "chat.completion", "model": request.get("model", "scripted"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}


@pytest.mark.slow       # the whole chain as Prefect flows
def test_the_example_runs_on_the_bundled_sample(prefect_harness, tmp_path, monkeypatch):
    from flows.synthesize import main
    from llm.serve import serve_in_thread

    endpoint = Endpoint()
    server = serve_in_thread(endpoint, "scripted")
    monkeypatch.chdir(ROOT)                  # the example's input path is the repository's
    run = tmp_path / "run"
    try:
        code = main(["--config", str(EXAMPLE), "--run", str(run), "--base-url", server.base_url, "--model", "scripted",
                     "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--max-retries", "0",
                     "--cache-dir", str(tmp_path / "cache"), "--sample-size", "6", "--k", "2"])
    finally:
        server.shutdown()
    assert code == 0
    stats = json.loads((run / "stats.json").read_text())
    assert stats["ingest"]["inputs"] == yaml.safe_load(EXAMPLE.read_text())["input"]
    assert stats["teacher.verify"]["endpoint"] == server.base_url.rstrip("/") and stats["teacher.verify"]["in"] == 6
    assert endpoint.asked["judge"] >= 6 and endpoint.asked["fill"] > 0        # one endpoint for both
    kept = pq.read_table(run / "preferences.parquet").num_rows
    rows = sum(pq.read_metadata(run / "export" / "trl-preference" / f"{s}.parquet").num_rows for s in ("train", "test"))
    assert rows == kept > 0                                                   # the example's export formats
    assert stats["data.export.trl"]["tokens"]["max_length"] > 0               # counted (embedded tokenizer)
