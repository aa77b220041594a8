"""The viewer against a second user and hostile clients: one viewer per audit file, annotator
names matched whole, pair ids with reserved characters, a form body refused while it streams, a
deadline for requests that arrive slowly, out-of-descriptor errors in one line, and a taken port
said in one line. The server tests run ``python -m dataset.viewer`` on a free port."""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from dataset.viewer.app import make_app
from dataset.viewer.audit import AuditBusy, AuditLog, answers_path, draw_sample
from dataset.viewer.cli import main
from dataset.viewer.source import PairSource
from viewer_run import make_viewer_run

ROOT = Path(__file__).resolve().parents[2]
LOCAL = "http://127.0.0.1:8765"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewer_limits")
    make_viewer_run(root, n_pairs=4)
    return root


def test_a_second_viewer_on_the_same_audit_refuses_in_one_line(run, capsys):
    source = PairSource.open(run)
    first = make_app(source, audit="bob", sample=4)
    with pytest.raises(AuditBusy, match=r"human-bob.parquet is being answered in another viewer \(pid \d+\)"):
        make_app(source, audit="bob", sample=4)
    assert main(["--run", str(run), "--audit", "bob", "--sample", "4", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "another viewer" in err[0]
    other = make_app(source, audit="carol", sample=4)           # another annotator is another file
    TestClient(first, base_url=LOCAL).post("/audit/0", data={"answer": "1"})
    TestClient(other, base_url=LOCAL).post("/audit/0", data={"answer": "2"})
    assert pq.read_table(run / "audit" / "human-bob.parquet").num_rows == 1


def test_answers_from_viewers_one_after_the_other_are_all_kept(run):
    source = PairSource.open(run)
    path = answers_path(source.audit_dir, "dan")
    sample = draw_sample(source.pairs, 4, 42)
    for position in range(3):              # what two viewers at once would have lost: each answer kept
        log = AuditLog(path, "dan", sample, 42)
        log.answer(position, "both")
        log.close()
    assert sorted(pq.read_table(path).column("position").to_pylist()) == [0, 1, 2]


def test_a_planted_symlink_is_neither_followed_nor_written_through(run, tmp_path):
    """A run directory from someone else: a lock file that is a symlink is refused (the viewer
    would truncate its target), and an ``audit/`` that points outside the run is refused before
    anything is made there."""
    shared = tmp_path / "shared"
    shutil.copytree(run, shared, ignore=shutil.ignore_patterns("audit"))
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (shared / "audit").mkdir()
    (shared / "audit" / ".human-mallory.parquet.lock").symlink_to(victim)
    source = PairSource.open(shared)
    with pytest.raises(ValueError, match="lock file .*a symlink: remove it"):
        make_app(source, audit="mallory", sample=2)
    assert victim.read_text() == "keep me"
    shutil.rmtree(shared / "audit")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (shared / "audit").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="is outside"):
        make_app(PairSource.open(shared), audit="mallory", sample=2)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("name", ["carol\n", "carol\r", "a\nb", "x" * 65])
def test_annotator_names_are_matched_whole(name):
    with pytest.raises(ValueError, match="annotator name"):
        answers_path(Path("audit"), name)


def test_pair_ids_with_reserved_characters_open_their_page(run, tmp_path):
    bench = tmp_path / "bench.parquet"
    table = pq.read_table(run / "export" / "webprmbench.parquet")
    ids = ["a/b", "../up", "q?x=1#frag", "sp ace%2F"]
    pq.write_table(table.set_column(table.schema.get_field_index("pair_id"), "pair_id",
                                    pa.array((ids * 4)[:table.num_rows])), bench)
    client = TestClient(make_app(PairSource.open(bench=bench)), base_url=LOCAL)
    links = re.findall(r'<a href="(/pair/[^"]+)">', client.get("/").text)
    assert len(links) == table.num_rows
    for link in links:
        page = client.get(link)
        assert page.status_code == 200, link
    for pid in ids[:table.num_rows]:
        assert client.get(links[ids.index(pid)]).text.count(f"pair <code>{pid.replace('&', '&amp;')}</code>") == 1


# -- a real server ---------------------------------------------------------------------------------
def start(run: Path, *flags, limit_files: int | None = None) -> tuple[subprocess.Popen, int]:
    def limit():
        if limit_files:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_files, limit_files))

    p = subprocess.Popen([sys.executable, "-m", "dataset.viewer", "--run", str(run), "--port", "0", *flags],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    line = p.stdout.readline()
    m = re.search(r":(\d+)/", line)
    if m is None:
        p.kill()
        raise AssertionError(f"no port: {line!r} {p.stderr.read()}")
    return p, int(m.group(1))


def stop(p: subprocess.Popen) -> str:
    p.terminate()
    try:
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    return err


def request(port: int, raw: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        return s.recv(65536)


def get(port: int, path: str = "/") -> bytes:
    return request(port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())


@pytest.fixture(scope="module")
def server(run, tmp_path_factory):
    audited = tmp_path_factory.mktemp("served") / "run"
    shutil.copytree(run, audited)
    p, port = start(audited, "--audit", "eve", "--sample", "2", "--request-timeout", "1")
    yield port
    stop(p)


def test_a_declared_large_body_is_refused_before_it_is_read(server):
    head = (b"POST /audit/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 419430400\r\n\r\n")
    assert request(server, head).startswith(b"HTTP/1.1 413")


def test_a_streamed_large_body_is_refused_while_it_streams(server):
    with socket.create_connection(("127.0.0.1", server), timeout=5) as s:
        s.sendall(b"POST /audit/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (8192, b"a" * 8192)
        sent, answer = 0, b""
        s.setblocking(False)
        while sent < 64 * 1024 * 1024 and not answer:
            try:
                s.send(chunk)
                sent += 8192
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break                        # the server closed the connection after its answer
            try:
                answer = s.recv(4096)
            except BlockingIOError:
                pass
        s.setblocking(True)
        answer = answer or s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413") and sent < 4 * 1024 * 1024


def test_slow_requests_are_closed_at_the_deadline(server):
    slow = [socket.create_connection(("127.0.0.1", server), timeout=5) for _ in range(20)]
    for s in slow:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")        # and never the blank line
    time.sleep(1.5)
    closed = 0
    for s in slow:
        try:
            closed += s.recv(1) == b""
        except OSError:
            closed += 1
        s.close()
    assert closed == len(slow)
    assert get(server).startswith(b"HTTP/1.1 200")


def test_running_out_of_descriptors_is_a_line_not_megabytes(run):
    p, port = start(run, "--request-timeout", "1", limit_files=64)
    try:
        held = []
        for _ in range(120):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.sendall(b"GET / HTTP/1.1\r\n")
                held.append(s)
            except OSError:
                break
        time.sleep(2.5)                       # past the deadline: the server closed them
        for s in held:
            s.close()
        time.sleep(1.2)                       # asyncio retries accept() after a second
        assert get(port).startswith(b"HTTP/1.1 200")
    finally:
        err = stop(p)
    assert "Traceback" not in err and len(err) < 2000, err[:2000]
    assert "Too many open files" in err


def test_a_taken_port_is_one_line_with_the_hint(run, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["--run", str(run), "--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is taken" in err[0] and "--port 0 picks a free one" in err[0]
