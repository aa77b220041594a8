"""What the dataset end publishes, against a hostile page and an interrupted run: page text in the
report and card renders as text (no heading, tag, link or image), the report's example says each
target's role and name and why a⁻ is worse, its plots keep one colour per meaning on integer ticks
and none carries one bar; a run that kept nothing has the kept pairs as its default config; an
export refuses a ``discarded.parquet`` its producer did not record."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from markdown_it import MarkdownIt

from dataset.card import card_data, write_card
from dataset.export import export
from dataset.export import main as export_main
from dataset.report import COLORS, attempts_figure, collect, md_code, md_fence, outcome_figure, write_report
from scripted_teacher import ScriptedTeacher, llm_config, make_run, start
from teacher.verify import VerifyConfig, verify

HOSTILE = ("# INJECTED\n<img src=x onerror=alert(1)> ![remote](https://evil.example/p.png) "
           "[link](https://evil.example) ``` `code` <script>x()</script> | cell \u202eDERETNE")


def _verify(root, cache, script: dict | None = None, outcome: str | None = None, k: int = 5):
    pairs = make_run(root, n_pairs=6)
    teacher = ScriptedTeacher(pairs)
    teacher.script = script(pairs) if script else {p["pair_id"]: [outcome] for p in pairs}
    server = start(teacher)
    try:
        verify(root, VerifyConfig(k=k, max_tokens=256, axtree_chars=800), llm_config(server, cache), progress=False)
    finally:
        server.shutdown()
    return pairs


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    """A verified run (one pair discarded after five attempts, one kept at the second) whose every
    step has hostile page text in its intent and URL."""
    root = tmp_path_factory.mktemp("published")
    _verify(root, root / ".llm_cache", script=lambda pairs: {pairs[0]["pair_id"]: ["disagree", "agree"],
                                                            pairs[1]["pair_id"]: ["disagree"] * 5})
    table = pq.read_table(root / "trajectories.parquet")
    rows = table.to_pylist()
    for r in rows:
        r["intent"] = f"{r['intent']} {HOSTILE}"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), root / "trajectories.parquet")
    for name in ("preferences.parquet", "discarded.parquet"):      # the teacher's copy of the intent too
        t = pq.read_table(root / name)
        t = t.set_column(t.schema.get_field_index("intent"), "intent",
                         pa.array([f"{i} {HOSTILE}" for i in t.column("intent").to_pylist()]))
        pq.write_table(t, root / name)
    return root


def rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_md_code_and_fence_hold_any_text():
    for text in (HOSTILE, "`", "``a``", " ", "a\n# b", "x | y"):
        html = rendered(f"para {md_code(text)}\n")
        assert html.count("<code>") == 1 and "<h1>" not in html and "<img" not in html and "<script" not in html
    html = rendered("\n".join(md_fence("```\n# INJECTED\n````\n<img src=x>")) + "\n")
    assert html.count("<pre>") == 1 and "<h1>" not in html and "<img" not in html
    table = rendered("| a | b |\n|---|---|\n| " + md_code("x | y", table=True) + " | z |\n")
    assert table.count("<td>") == 2 and "x | y" in table


def test_page_text_in_the_report_and_card_renders_as_text(kept_run):
    report = write_report(kept_run).read_text()
    html = rendered(report)
    assert "INJECTED" in report and "<h1>INJECTED" not in html
    assert "\u202e" not in report and "[U+202E]DERETNE" in report          # no bidi override reorders it
    assert html.count("<h1>") == 1                              # the report's own title only
    assert "<script" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert "evil.example/p.png\"" not in html and 'href="https://evil.example"' not in html
    images = [i.split(">")[0] for i in html.split("<img")[1:]]         # the plots only
    assert images and all(i.split('src="')[1].split('"')[0].endswith(".png") and "evil" not in i for i in images)
    card = rendered(write_card(kept_run).read_text().split("---\n", 2)[2])
    assert "<script" not in card and "<img" not in card


def test_the_report_example_names_the_targets_and_says_why(kept_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(kept_run, run)
    evidence = json.dumps({"hops": 2, "near_hops": 3, "shared_container": ["navigation", "Main \ue603"]})
    t = pq.read_table(run / "candidates.parquet")
    t = t.set_column(t.schema.get_field_index("evidence"), "evidence", pa.array([evidence] * t.num_rows))
    pq.write_table(t, run / "candidates.parquet")
    r = collect(run)
    ex = r["example"]
    assert ex["pos_target"] is None or {"role", "name"} <= set(ex["pos_target"])
    targets = [t for t in (ex["pos_target"], ex["neg_target"]) if t]
    assert targets and all(t["role"] for t in targets)
    report = write_report(run).read_text()
    section = report.split("## An example pair")[1]
    for t in targets:
        assert f"{t['role']} '{t['name']}'" in section
    if ex["rule"] == "structurally_near":
        assert "a nearby element: 2 hops from a⁺'s target, inside navigation 'Main [icon]'" in section
    else:
        assert "Why the negative is worse" in section


def test_plots_share_colours_use_integer_ticks_and_never_show_one_bar(kept_run, tmp_path):
    import matplotlib.colors as mcolors

    r = collect(kept_run)
    for fig in (outcome_figure(r), attempts_figure(r)):
        ax = fig.axes[0]
        by_label = {c.get_label(): c.patches[0].get_facecolor() for c in ax.containers}
        meaning = {label.split(" ")[0]: colour for label, colour in by_label.items()}
        assert meaning == {"kept": mcolors.to_rgba(COLORS["kept"]), "discarded": mcolors.to_rgba(COLORS["discarded"])}
        fig.canvas.draw()
        assert all(float(t.get_text().replace("−", "-")).is_integer() for t in ax.get_yticklabels() if t.get_text())
    # K effectively 1: every pair decided at its first attempt, so the attempts plot is one bar: left out
    one = tmp_path / "one"
    _verify(one, one / ".llm_cache", outcome="agree", k=1)
    (one / "report").mkdir()
    (one / "report" / "attempts.png").write_bytes(b"stale")
    text = write_report(one).read_text()
    assert not (one / "report" / "attempts.png").exists() and "![attempts]" not in text
    assert "No attempts plot" in text and (one / "report" / "gmcp.png").exists()


@pytest.fixture(scope="module")
def none_kept(tmp_path_factory):
    root = tmp_path_factory.mktemp("none_kept")
    _verify(root, root / ".llm_cache", outcome="disagree", k=1)
    export(root, "webprmbench")
    return root


def test_a_run_that_kept_nothing_defaults_to_the_kept_pairs(none_kept, tmp_path, monkeypatch):
    import datasets

    assert pq.read_metadata(none_kept / "preferences.parquet").num_rows == 0
    head = card_data(none_kept).to_dict()
    default = [c for c in head["configs"] if c.get("default")]
    assert [c["config_name"] for c in default] == ["preferences"]
    assert default[0]["data_files"] == [{"split": "train", "path": "preferences.parquet"}]
    on_disk = yaml.safe_load((none_kept / "README.md").read_text().split("---\n")[1])
    assert [c["config_name"] for c in on_disk["configs"] if c.get("default")] == ["preferences"]
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    try:
        ds = datasets.load_dataset(str(none_kept), cache_dir=str(tmp_path / "hf"))
    except (ValueError, datasets.exceptions.DatasetGenerationError) as e:
        assert "\n" not in str(e)                 # datasets' own one-line refusal of an empty split
    else:
        assert list(ds) == ["train"] and len(ds["train"]) == 0
    rejected = datasets.load_dataset(str(none_kept), "discarded", cache_dir=str(tmp_path / "hf"))
    assert len(rejected["train"]) == 6            # by name only


@pytest.mark.parametrize("how", ["rewritten", "unrecorded"])
def test_export_refuses_a_discarded_file_its_producer_did_not_record(none_kept, tmp_path, capsys, how):
    run = tmp_path / "run"
    shutil.copytree(none_kept, run)
    assert export_main(["--run", str(run), "--format", "webprmbench", "--no-card"]) == 0
    capsys.readouterr()
    if how == "rewritten":                 # a verify rerun that wrote discarded.parquet, then stopped (ENOSPC)
        t = pq.read_table(run / "discarded.parquet")
        pq.write_table(t.slice(0, 3), run / "discarded.parquet")
    else:                                  # no stats entry records the file
        stats = json.loads((run / "stats.json").read_text())
        del stats["teacher.verify"]["fingerprints"]["outputs"]["discarded.parquet"]
        (run / "stats.json").write_text(json.dumps(stats))
    for fmt in ("trl", "webprmbench", "trl-preference"):
        assert export_main(["--run", str(run), "--format", fmt, "--no-card"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "discarded.parquet" in err[0] and "teacher.verify" in err[0], err
