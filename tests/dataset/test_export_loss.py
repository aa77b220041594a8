"""No silent zeros at the end of the chain: a teacher that keeps no pair says why in one line, and
the export of the empty preferences says it has nothing and why the teacher kept nothing."""

from __future__ import annotations

from scripted_teacher import ScriptedTeacher, make_run, start


def test_verify_and_export_break_an_empty_dataset_down_by_reason(tmp_path, capsys):
    from dataset.export import main as export_main
    from teacher.verify import main as verify_main

    pairs = make_run(tmp_path, n_pairs=4)
    teacher = ScriptedTeacher(pairs)
    teacher.script = {p["pair_id"]: ["disagree"] * 2 for p in pairs[:3]} | {pairs[3]["pair_id"]: ["unparsed"] * 2}
    server = start(teacher)
    try:
        assert verify_main(["--run", str(tmp_path), "--base-url", server.base_url, "--model", "scripted-teacher",
                            "--cache-dir", str(tmp_path / "cache"), "--max-retries", "0", "--k", "2",
                            "--api-key-env", "SURFPRM_TEST_KEY_UNSET", "--quiet"]) == 0
    finally:
        server.shutdown()
    verified = "0 of 4 sampled pairs kept; lost 4: 3 all_attempts_disagree (every attempt preferred the negative), " \
               "1 no_agreement (no attempt agreed; some gave no answer tag or were cut off)"
    assert f"teacher.verify: {verified}" in capsys.readouterr().out
    assert export_main(["--run", str(tmp_path), "--format", "trl", "--format", "webprmbench", "--no-card"]) == 0
    out = capsys.readouterr().out
    for key in ("data.export.trl", "data.export.webprmbench"):
        assert f"{key}: 0 pairs: its input holds no pairs; teacher.verify: {verified}" in out
