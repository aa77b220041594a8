"""``harness.env.lighten_playwright_stacks``: Playwright's per-call stack captures, without the
source lookups, carry what Playwright reads of them (no browser needed)."""

import inspect
import traceback

import pytest

pytest.importorskip("playwright")

from harness.env import _Stacks, lighten_playwright_stacks  # noqa: E402


def _nested(depth, fn):
    return _nested(depth - 1, fn) if depth else fn()


def test_the_same_frames_as_inspect_and_traceback():
    light, real = _nested(5, lambda: (_Stacks.stack(), inspect.stack(0)))
    # the captures differ only in the line of the lambda that took them (the first frame)
    assert [(f.filename, f.function, f.frame) for f in light] == [(f.filename, f.function, f.frame) for f in real]
    assert [f.lineno for f in light[1:]] == [f.lineno for f in real[1:]]
    light, real = _nested(3, lambda: (_Stacks.extract_stack(), traceback.extract_stack()))
    assert [(f.filename, f.name) for f in light] == [(f.filename, f.name) for f in real]
    assert light[-2].line == real[-2].line and "_nested" in light[-2].line    # lines read when asked for


def test_playwright_reads_the_same_api_name_and_frames():
    from playwright._impl import _connection

    assert lighten_playwright_stacks() and lighten_playwright_stacks()        # idempotent
    assert isinstance(_connection.inspect, _Stacks) and _connection.inspect.FrameInfo is inspect.FrameInfo

    def capture():
        return (_connection._extract_stack_trace_information_from_stack(_connection.inspect.stack(), False),
                _connection._extract_stack_trace_information_from_stack(inspect.stack(), False))

    light, real = _nested(4, capture)
    assert light["apiName"] == real["apiName"]
    assert [(f["file"], f["function"]) for f in light["frames"]] == [(f["file"], f["function"])
                                                                      for f in real["frames"]]
