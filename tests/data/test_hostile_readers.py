"""Hostile inputs to the readers, round 3 (issue 24 items 6, 7, 8, 9 and 11): folders with symlink
loops, ``summary_info.json`` or a step that is a FIFO or ``/dev/zero``, two runs of one name under
two roots, site names that collided or could not be written, action arguments of types
BrowserGym does not take, and a decompression cap of ``inf``. Each probe is generated here, small;
the CLI ones run in a subprocess with a timeout, so a hang fails instead of stalling the suite."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.actions import ActionParseError, parse_action
from data.ingest import ingest
from data.rundir import site_dirname
from data.schema import TRAJECTORY_SCHEMA
from data.sites import normalize_url_path, site_of
from hostile_util import AXTREE, EXP, balanced, cli, experiment, no_traceback, rejects, stats, webprm_row

STEPS = 3       # experiment() writes three good steps


def _rows(run):
    return pq.read_table(run / "trajectories.parquet").to_pylist()


# -- item 6: symlink loops --------------------------------------------------------------------------
def test_symlink_loops_are_walked_once(tmp_path):
    root = tmp_path / "in"
    experiment(root / "a")
    experiment(root / "b", name=EXP.replace("_3", "_4"))
    os.symlink(root, root / "a" / "loop")           # back to the top
    os.symlink(root / "a", root / "b" / "loop2")    # across
    os.symlink(root / "b", root / "b" / "self")     # onto itself
    proc = cli("data.ingest", "--source", "agentlab", "--input", str(root), "--out", str(tmp_path / "run"), timeout=60)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    s = balanced(tmp_path / "run")
    assert (s["in"], s["out"], s["rejected"], s["trajectories"]) == (2 * STEPS, 2 * STEPS, {}, 2)


def test_a_folder_that_cannot_be_listed_costs_only_itself(tmp_path, monkeypatch):
    import data.readers.agentlab as reader

    root = tmp_path / "in"
    experiment(root / "a")
    (root / "locked").mkdir()
    os.symlink("self", root / "self")                    # a link to itself: skipped, not a crash
    real = reader.is_experiment_dir

    def is_experiment_dir(path):     # root can read any folder: the refusal is simulated
        if path.name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(reader, "is_experiment_dir", is_experiment_dir)
    run = tmp_path / "run"
    stats_ = ingest("agentlab", [root], run)
    assert (stats_.n_in, stats_.n_out, dict(stats_.rejected)) == (STEPS + 1, STEPS, {"corrupt_file": 1})
    (rej,) = rejects(run)
    assert rej["source"] == str(root / "locked") and "PermissionError" in rej["detail"]


# -- item 9: summary_info.json (and steps) that are not regular files -------------------------------
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge"])
def test_summary_that_is_not_a_small_regular_file_is_a_reject_not_a_hang(tmp_path, kind):
    exp = experiment(tmp_path / "in")
    summary = exp / "summary_info.json"
    summary.unlink()
    if kind == "fifo":
        os.mkfifo(summary)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", summary)
    else:
        summary.write_bytes(b" " * (5 * 2**20))     # 5 MB of blanks: over the 4 MB cap
    proc = cli("data.ingest", "--source", "agentlab", "--input", str(exp), "--out", str(tmp_path / "run"), timeout=60)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    s = balanced(tmp_path / "run")
    reason = "too_large" if kind == "huge" else "not_regular_file"
    assert (s["in"], s["out"], s["rejected"]) == (STEPS + 1, STEPS, {reason: 1})
    (rej,) = rejects(tmp_path / "run")
    assert rej["key"] == {"traj_id": EXP, "file": "summary_info.json"}
    assert rej["detail"].startswith("summary_info.json: ")
    if kind == "fifo":
        assert "FIFO" in rej["detail"]
    rows = _rows(tmp_path / "run")
    assert all(r["success"] is None for r in rows)       # success unknown, the steps kept


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_step_or_goal_that_is_not_a_regular_file_is_a_reject(tmp_path, kind):
    exp = experiment(tmp_path / "in")
    for name in ("step_1.pkl.gz", "goal_object.pkl.gz"):
        path = exp / name
        if path.exists():
            path.unlink()
        os.mkfifo(path) if kind == "fifo" else os.symlink("/dev/zero", path)
    proc = cli("data.ingest", "--source", "agentlab", "--input", str(exp), "--out", str(tmp_path / "run"), timeout=60)
    no_traceback(proc)
    s = balanced(tmp_path / "run")
    assert (s["in"], s["out"], s["rejected"]) == (STEPS + 1, STEPS - 1, {"not_regular_file": 2})


# -- item 7: one name under two roots ---------------------------------------------------------------
def test_runs_of_one_name_under_two_roots_are_two_trajectories(tmp_path):
    from conftest import write_step_pickle
    from hostile_util import state

    a = experiment(tmp_path / "A")
    b = experiment(tmp_path / "B", n=5)
    for i in range(5):          # B's run has another goal
        st = state(action=None if i == 4 else "```click('13')```")
        st["obs"]["chat_messages"] = [{"role": "user", "message": "Sell the thing"}]
        write_step_pickle(b / f"step_{i}.pkl.gz", st)
    run = tmp_path / "run"
    stats_ = ingest("agentlab", [tmp_path / "A", tmp_path / "B"], run)
    assert (stats_.n_in, stats_.n_out, dict(stats_.rejected)) == (STEPS + 5, STEPS + 5, {})
    by_traj = {}
    for r in _rows(run):
        by_traj.setdefault(r["traj_id"], []).append(r)
    assert sorted(by_traj) == [f"A/{EXP}", f"B/{EXP}"]
    assert [r["step_idx"] for r in by_traj[f"A/{EXP}"]] == [0, 1, 2]
    assert {r["intent"] for r in by_traj[f"A/{EXP}"]} == {"Buy the thing"}
    assert {r["intent"] for r in by_traj[f"B/{EXP}"]} == {"Sell the thing"}
    assert stats(run)["trajectories"] == 2
    # one folder reached twice (a root and the run inside it) is still one trajectory
    again = ingest("agentlab", [tmp_path / "A", a], tmp_path / "run2")
    assert (again.n_out, dict(again.rejected)) == (STEPS, {"duplicate_step": STEPS})
    assert {r["traj_id"] for r in _rows(tmp_path / "run2")} == {EXP}


# -- item 8: site folder names ----------------------------------------------------------------------
TRICKY = ["a b", "a_b", "a_b-fbd987", "a_b-" + "0" * 64, "..", ".", "", "a/b", "a\\b", "Apple.com", "apple.com",
          "x" * 300, "x" * 301, "\u00fc" * 200, "\u00fc" * 201, "bücher.example", "xn--bcher-kva.example",
          "a\x00b", "\ud800", "shop-cafe", "servicenow", "site"]


def test_site_dirname_is_injective_and_always_writable(tmp_path):
    names = [site_dirname(s) for s in TRICKY]
    assert len(set(names)) == len(TRICKY)
    assert len({n.lower() for n in names}) == len(TRICKY)          # also on a case-insensitive disk
    for n in names:
        assert n and "/" not in n and "\\" not in n and "\x00" not in n and not n.startswith(".")
        assert len(n.encode("utf-8")) <= 255
        (tmp_path / n).mkdir()                                       # no ENAMETOOLONG, no escape
    # the plain names stay readable; a name that looks digested gets its own full digest
    assert site_dirname("servicenow") == "servicenow" and site_dirname("shop-cafe") == "shop-cafe"
    assert site_dirname("a_b-fbd987").startswith("a_b-fbd987-") and len(site_dirname("a b")) == len("a_b-") + 64


def _canonical(site, url, traj):
    return {"source": "agentlab", "site": site, "task_id": "t", "traj_id": traj, "step_idx": 0, "intent": "Buy it",
            "url": url, "observation": AXTREE, "obs_format": "indented", "html": None, "action": "click('13')",
            "action_error": None, "thought": None, "success": True, "source_path": "x", "meta": "{}"}


def test_colliding_and_overlong_sites_build_their_own_graphs(tmp_path):
    from graph.build import build_graphs
    from graph.load import list_sites, load_graph

    long_host = "h" * 63 + "." + "o" * 63 + "." + "s" * 63 + "." + "t" * 60 + ".example"    # 260 bytes
    assert len(long_host) == 260 and site_of(f"http://{long_host}/") == long_host
    rows = [_canonical("a b", "http://a.example/", "t1"), _canonical("a_b-fbd987", "http://b.example/", "t2"),
            _canonical(site_of(f"http://{long_host}/"), f"http://{long_host}/", "t3")]
    pq.write_table(pa.Table.from_pylist(rows, schema=TRAJECTORY_SCHEMA), tmp_path / "t.parquet")
    run = tmp_path / "run"
    ingest("canonical", [tmp_path / "t.parquet"], run)
    build_graphs(run, workers=1)
    assert sorted(list_sites(run)) == sorted(["a b", "a_b-fbd987", long_host])
    for site in ("a b", "a_b-fbd987", long_host):
        G = load_graph(run, site)
        assert {d["site"] for _, d in G.nodes(data=True)} == {site}


def test_hosts_are_idna_normalized_and_lose_the_trailing_dot():
    assert site_of("https://dev1.service-now.com./now") == "servicenow"
    assert site_of("http://bücher.example/x") == site_of("http://xn--bcher-kva.example/x") == "xn--bcher-kva.example"
    assert site_of("http://B\u00dcCHER.example./x") == "xn--bcher-kva.example"
    assert normalize_url_path("http://bücher.example./a/") == normalize_url_path("http://xn--bcher-kva.example/a")
    assert site_of("http://" + "a" * 70 + ".example/") == "a" * 70 + ".example"      # IDNA cannot: kept, no crash


# -- item 11: action arguments and the decompression cap -------------------------------------------
@pytest.mark.parametrize("text", ["fill('4', {'a': 1})", "click('2', modifiers={'Shift'})", "fill('4', b'x')",
                                  "fill('6', ...)", "click('2', button='sideways')", "click('2', modifiers=['Hyper'])",
                                  "fill('4', 5)", "scroll('a', 0)", "tab_focus(1.5)", "tab_focus(True)",
                                  "fill('4', 'x', enable_autocomplete_menu=1)", "select_option('3', [1, 2])",
                                  "click(None)", "goto(['http://x'])", "scroll_at(1.5, 2, 0, 10)"])
def test_arguments_of_types_browsergym_does_not_take_are_refused(text):
    with pytest.raises(ActionParseError, match="BrowserGym's argument types"):
        parse_action(text)


@pytest.mark.parametrize("text,canonical", [
    ("click('2', modifiers=['Shift'])", "click('2', 'left', ['Shift'])"),
    ("click('2', 'right', ('Alt', 'Meta'))", "click('2', 'right', ['Alt', 'Meta'])"),
    ("fill('4', 'x', True)", "fill('4', 'x', True)"),
    ("select_option('3', ['a', 'b'])", "select_option('3', ['a', 'b'])"),
    ("scroll(0, 200.5)", "scroll(0, 200.5)"), ("tab_focus(2.0)", "tab_focus(2)"), ("click(12)", "click('12')"),
    ("mouse_click(1, 2, 'middle')", "mouse_click(1, 2, 'middle')"), ("noop(500)", "noop(500)"),
])
def test_browsergym_argument_types_still_parse(text, canonical):
    assert parse_action(text).to_string() == canonical


def test_ellipsis_demonstration_is_a_reject_not_stored(tmp_path):
    rows = [webprm_row(0), webprm_row(1, chosen={"thought": "", "action": "fill('6', ...)"})]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    stats_ = ingest("webprm", [tmp_path / "rows.json"], tmp_path / "run")
    assert (stats_.n_out, dict(stats_.rejected)) == (1, {"unparseable_action": 1})
    assert not [r for r in _rows(tmp_path / "run") if "Ellipsis" in (r["action"] or "")]


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400", "1e300", "0", "-1", "ten"])
def test_max_decompressed_mb_is_checked_where_it_is_parsed(tmp_path, value):
    exp = experiment(tmp_path / "in")
    proc = cli("data.ingest", "--source", "agentlab", "--input", str(exp), "--out", str(tmp_path / "run"),
               "--max-decompressed-mb", value)
    no_traceback(proc)
    assert proc.returncode == 2 and "--max-decompressed-mb" in proc.stderr
    assert not (tmp_path / "run").exists()              # refused before anything was read or written
    with pytest.raises(ValueError):
        ingest("agentlab", [exp], tmp_path / "run", max_decompressed_mb=float(value) if value != "ten" else value)
