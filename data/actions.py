"""BrowserGym actions: parse, validate and normalize action strings.

BrowserGym's high-level action grammar is a Python call expression with literal arguments,
e.g. ``click('a51', button="right")``. We parse it with :mod:`ast` (no evaluation), bind keyword
arguments to BrowserGym's signatures, and render one canonical string so that the same action
always compares equal: positional arguments, ``repr`` quoting, trailing defaults dropped.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

_NO_DEFAULT = object()

# op -> ((param, default), ...) as in browsergym.core.action.functions (0.14).
SIGNATURES: dict[str, tuple[tuple[str, object], ...]] = {
    "send_msg_to_user": (("text", _NO_DEFAULT),),
    "report_infeasible": (("reason", _NO_DEFAULT),),
    "noop": (("wait_ms", 1000),),
    "fill": (("bid", _NO_DEFAULT), ("value", _NO_DEFAULT), ("enable_autocomplete_menu", False)),
    "check": (("bid", _NO_DEFAULT),),
    "uncheck": (("bid", _NO_DEFAULT),),
    "select_option": (("bid", _NO_DEFAULT), ("options", _NO_DEFAULT)),
    "click": (("bid", _NO_DEFAULT), ("button", "left"), ("modifiers", [])),
    "dblclick": (("bid", _NO_DEFAULT), ("button", "left"), ("modifiers", [])),
    "hover": (("bid", _NO_DEFAULT),),
    "press": (("bid", _NO_DEFAULT), ("key_comb", _NO_DEFAULT)),
    "focus": (("bid", _NO_DEFAULT),),
    "clear": (("bid", _NO_DEFAULT),),
    "drag_and_drop": (("from_bid", _NO_DEFAULT), ("to_bid", _NO_DEFAULT)),
    "upload_file": (("bid", _NO_DEFAULT), ("file", _NO_DEFAULT)),
    "scroll": (("delta_x", _NO_DEFAULT), ("delta_y", _NO_DEFAULT)),
    "scroll_at": (("x", _NO_DEFAULT), ("y", _NO_DEFAULT), ("dx", _NO_DEFAULT), ("dy", _NO_DEFAULT)),
    "mouse_move": (("x", _NO_DEFAULT), ("y", _NO_DEFAULT)),
    "mouse_up": (("x", _NO_DEFAULT), ("y", _NO_DEFAULT), ("button", "left")),
    "mouse_down": (("x", _NO_DEFAULT), ("y", _NO_DEFAULT), ("button", "left")),
    "mouse_click": (("x", _NO_DEFAULT), ("y", _NO_DEFAULT), ("button", "left")),
    "mouse_dblclick": (("x", _NO_DEFAULT), ("y", _NO_DEFAULT), ("button", "left")),
    "mouse_drag_and_drop": (
        ("from_x", _NO_DEFAULT), ("from_y", _NO_DEFAULT), ("to_x", _NO_DEFAULT), ("to_y", _NO_DEFAULT)),
    "mouse_upload_file": (("x", _NO_DEFAULT), ("y", _NO_DEFAULT), ("file", _NO_DEFAULT)),
    "keyboard_press": (("key", _NO_DEFAULT),),
    "keyboard_up": (("key", _NO_DEFAULT),),
    "keyboard_down": (("key", _NO_DEFAULT),),
    "keyboard_type": (("text", _NO_DEFAULT),),
    "keyboard_insert_text": (("text", _NO_DEFAULT),),
    "goto": (("url", _NO_DEFAULT),),
    "go_back": (),
    "go_forward": (),
    "new_tab": (),
    "tab_close": (),
    "tab_focus": (("index", _NO_DEFAULT),),
}

# The argument types of BrowserGym's action functions (browsergym.core.action.functions, 0.14):
# ``str``, a number (``float``; ``int`` where it says so), ``bool``, a ``Literal`` (a set of
# strings), or ``str | list[str]`` / ``list[Literal]``. Element ids (``bid: str``) are also
# written as bare numbers by agents (``click(12)``), and read as their text.
_STR, _NUMBER, _INT, _BOOL, _BID, _STRS = "str", "number", "int", "bool", "bid", "str | list[str]"
_BUTTON = frozenset({"left", "middle", "right"})
_MODIFIERS = frozenset({"Alt", "Control", "ControlOrMeta", "Meta", "Shift"})
ARG_TYPES: dict[str, object] = {
    "text": _STR, "reason": _STR, "value": _STR, "key_comb": _STR, "key": _STR, "url": _STR,
    "wait_ms": _NUMBER, "delta_x": _NUMBER, "delta_y": _NUMBER, "x": _NUMBER, "y": _NUMBER,
    "from_x": _NUMBER, "from_y": _NUMBER, "to_x": _NUMBER, "to_y": _NUMBER, "dx": _NUMBER, "dy": _NUMBER,
    "index": _INT, "enable_autocomplete_menu": _BOOL, "bid": _BID, "from_bid": _BID, "to_bid": _BID,
    "options": _STRS, "file": _STRS, "button": _BUTTON, "modifiers": ("list", _MODIFIERS),
}
# Where one op types a name differently: scroll_at(x: int, y: int, dx: int, dy: int).
OP_ARG_TYPES: dict[tuple[str, str], object] = {("scroll_at", n): _INT for n in ("x", "y", "dx", "dy")}


def arg_type(op: str, name: str):
    """BrowserGym's type of argument ``name`` of ``op`` (one of the kinds above)."""
    return OP_ARG_TYPES.get((op, name), ARG_TYPES[name])


def _type_problem(kind, value) -> str | None:
    """Why ``value`` is not of BrowserGym's argument type ``kind``, or None."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == _STR:
        ok = isinstance(value, str)
    elif kind == _NUMBER:
        ok = is_number
    elif kind == _INT:
        ok = is_number and float(value).is_integer()
    elif kind == _BOOL:
        ok = isinstance(value, bool)
    elif kind == _BID:
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    elif kind == _STRS:
        ok = isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))
    elif isinstance(kind, frozenset):
        ok = isinstance(value, str) and value in kind
    else:                           # ("list", allowed strings)
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) and v in kind[1] for v in value)
    if ok:
        return None
    want = (f"one of {sorted(kind)}" if isinstance(kind, frozenset)
            else f"a list of {sorted(kind[1])}" if isinstance(kind, tuple) else kind)
    return f"is {type(value).__name__} {_short_repr(value)}, not {want}"


def _short_repr(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# Ops whose first argument is an element id (bid) in the observation.
ELEMENT_OPS = frozenset(op for op, params in SIGNATURES.items() if params and params[0][0] in ("bid", "from_bid"))
# Ops that type text into the target (their value is the typed text).
VALUE_OPS = {"fill": "value", "select_option": "options", "press": "key_comb", "upload_file": "file"}


class ActionParseError(ValueError):
    """The text is not one well-formed BrowserGym action."""


@dataclass(frozen=True, slots=True)
class Action:
    """One BrowserGym action: ``op`` and its arguments bound to BrowserGym's parameter names."""

    op: str
    args: tuple[tuple[str, object], ...]

    @property
    def bid(self) -> str | None:
        """The target element id, for element ops (``click``, ``fill``, ...)."""
        if self.op in ELEMENT_OPS:
            return str(self.args[0][1])
        return None

    @property
    def value(self) -> object | None:
        """The typed / selected / pressed value, or the message text for user-facing ops."""
        name = VALUE_OPS.get(self.op) or {"send_msg_to_user": "text", "report_infeasible": "reason",
                                          "goto": "url"}.get(self.op)
        return dict(self.args).get(name) if name else None

    def to_string(self) -> str:
        """Canonical BrowserGym text: positional arguments, trailing defaults dropped."""
        values = [v for _, v in self.args]
        params = SIGNATURES[self.op]
        while values and len(values) > _required(params) and values[-1] == _freeze(params[len(values) - 1][1]):
            values.pop()
        return f"{self.op}({', '.join(_render(v) for v in values)})"

    @classmethod
    def build(cls, op: str, *values) -> "Action":
        """An action from positional argument values (no text parsing: for generated actions)."""
        params = SIGNATURES[op]
        if len(values) > len(params) or len(values) < _required(params):
            raise ActionParseError(f"{op} takes {_required(params)}..{len(params)} arguments, got {len(values)}")
        args = [(name, _freeze(values[i] if i < len(values) else default)) for i, (name, default) in enumerate(params)]
        if op in ELEMENT_OPS:
            args[0] = (args[0][0], str(args[0][1]))
        return cls(op, tuple(args))

    def with_bid(self, bid: str) -> "Action":
        """The same action on another element (used to build contrastive negatives)."""
        if self.op not in ELEMENT_OPS:
            raise ValueError(f"{self.op} has no target element")
        return Action(self.op, ((self.args[0][0], bid),) + self.args[1:])

    def __str__(self) -> str:
        return self.to_string()


def _render(value) -> str:
    # Sequences are stored as tuples (hashable) but BrowserGym writes lists.
    if isinstance(value, tuple):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    return repr(value)


def _required(params) -> int:
    return sum(1 for _, d in params if d is _NO_DEFAULT)


MAX_ACTION_CHARS = 10_000
# Numbers an action may carry: coordinates, scroll deltas, waits and tab indices are far below
# this; a bigger literal (``scroll(0xfff...f, 0)`` with 4,000 digits) could not even be written
# back as text (Python's int-to-str digit limit).
MAX_ABS_NUMBER = 2**53


def _check_number(value) -> None:
    """Raise ActionParseError for an argument value that is not a finite, moderate number (ints
    and floats, also inside lists)."""
    if isinstance(value, (list, tuple)):
        for v in value:
            _check_number(v)
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if abs(value) > MAX_ABS_NUMBER:
            raise ActionParseError(f"integer argument with {value.bit_length()} bits is out of range")
    elif isinstance(value, float):
        if not math.isfinite(value) or abs(value) > MAX_ABS_NUMBER:
            raise ActionParseError(f"number argument {value!r} is out of range")
    elif isinstance(value, complex):
        raise ActionParseError("complex number argument")


def _freeze(value):
    """Hashable, canonical argument values: lists become tuples, integral floats ints."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def parse_action(text: str) -> Action:
    """Parse one BrowserGym action call such as ``click('a51')``; raise ActionParseError (also for
    a text that is not a string, and for numbers out of range)."""
    if text is not None and not isinstance(text, str):
        raise ActionParseError(f"action is {type(text).__name__}, not str")
    text = (text or "").strip()
    if not text:
        raise ActionParseError("empty action")
    if len(text) > MAX_ACTION_CHARS:
        raise ActionParseError(f"action longer than {MAX_ACTION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="exec")
    except SyntaxError as e:
        raise ActionParseError(f"not a python call: {e.msg}") from None
    except ValueError as e:   # a literal past the int-digit limit, a NUL byte
        raise ActionParseError(f"not a python call: {str(e)[:120]}") from None
    except (MemoryError, RecursionError):
        raise ActionParseError("action too deeply nested to parse") from None
    calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    if len(tree.body) != 1 or len(calls) != 1:
        raise ActionParseError(f"expected exactly one action call, found {len(tree.body)} statements")
    call = calls[0].value
    if not isinstance(call.func, ast.Name):
        raise ActionParseError("action must be a plain function call")
    op = call.func.id
    if op not in SIGNATURES:
        raise ActionParseError(f"unknown action {op!r}")
    params = SIGNATURES[op]
    if len(call.args) > len(params):
        raise ActionParseError(f"{op} takes at most {len(params)} arguments, got {len(call.args)}")
    bound: dict[str, object] = {}
    try:
        for (name, _), node in zip(params, call.args):
            bound[name] = ast.literal_eval(node)
        for kw in call.keywords:
            if kw.arg is None or kw.arg not in dict(params):
                raise ActionParseError(f"{op} has no argument {kw.arg!r}")
            if kw.arg in bound:
                raise ActionParseError(f"{op} got argument {kw.arg!r} twice")
            bound[kw.arg] = ast.literal_eval(kw.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ActionParseError(f"{op} arguments must be literals") from None
    for name, value in bound.items():
        _check_number(value)
        problem = _type_problem(arg_type(op, name), value)
        if problem:
            raise ActionParseError(f"{op} argument {name!r} {problem} (BrowserGym's argument types)")
    args = []
    for name, default in params:
        if name in bound:
            args.append((name, _freeze(bound[name])))
        elif default is _NO_DEFAULT:
            raise ActionParseError(f"{op} is missing argument {name!r}")
        else:
            args.append((name, _freeze(default)))
    if op in ELEMENT_OPS:
        bid = args[0][1]
        if not isinstance(bid, (str, int)) or isinstance(bid, bool) or not str(bid).strip():
            raise ActionParseError(f"{op} needs a non-empty element id")
        args[0] = (args[0][0], str(bid))
    return Action(op, tuple(args))


# A fenced code block, with an optional language tag on its opening line (```python, ```py3).
_FENCE = re.compile(r"```[ \t]*(?:[\w+-]+[ \t]*\n)?(.*?)```", re.S)
# Where an answer labels its action (WebPRMBench responses, ReAct-style "Thought: ... Action: ...").
_ACTION_LABEL = re.compile(r"\bACTION\s*:", re.I)
# The start of a call to one of BrowserGym's actions (``\b``: no ``click(`` inside ``dblclick(``).
_OP_CALL = re.compile(r"\b(" + "|".join(sorted(SIGNATURES, key=len, reverse=True)) + r")\s*\(")
# A call longer than this is not looked for inside prose (each candidate end is one ast.parse).
_MAX_CALL_CHARS = 4000


def extract_action(text: str) -> Action | None:
    """The action of a model's answer, or None when it holds no single well-formed action.

    One order for every answer the project reads (policy samples in ``search``, benchmark and
    export responses in ``prm.evaluate``):

    1. the whole text, when it is one action call (a bare action; a trailing ``# comment`` is fine);
    2. else the last fenced code block, which is then the answer: its one action call, text around
       the call inside the block tolerated; a block of several calls is several actions, so None
       (AgentLab agents and the search policy end their answer with the block);
    3. else the first call after the last ``ACTION:`` label (``THOUGHT: ... ACTION: click('12')``);
    4. else the last well-formed call in the text: agents think first and act last, so an earlier
       call is a thought about an alternative (``not click('40') but click('12')``).
    """
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return parse_action(text)
    except ActionParseError:
        pass
    block = _last_block(text)
    if block is not None:
        calls = _calls(block.group(1))
        return calls[0] if len(calls) == 1 else None
    labels = list(_ACTION_LABEL.finditer(text))
    if labels:
        after = _calls(text[labels[-1].end():])
        if after:
            return after[0]
    calls = _calls(text)
    return calls[-1] if calls else None


def _calls(text: str) -> list[Action]:
    """The well-formed action calls in ``text`` in order, each the shortest that parses from where
    its op name starts; a call inside another's arguments (``send_msg_to_user('click(1)')``) is
    not counted again."""
    try:
        return [parse_action(text)]
    except ActionParseError:
        pass
    found, pos = [], 0
    for m in _OP_CALL.finditer(text):
        if m.start() < pos:
            continue
        close = text.find(")", m.end() - 1)
        while close != -1 and close - m.start() < _MAX_CALL_CHARS:
            try:
                found.append(parse_action(text[m.start():close + 1]))
            except ActionParseError:
                close = text.find(")", close + 1)
                continue
            pos = close + 1
            break
    return found


def split_agent_output(raw: str) -> tuple[str, str]:
    """Split an agent's raw output into (thought, action text).

    AgentLab agents end their output with a fenced code block holding the action; the action
    is the last block, the thought is everything before it.
    """
    last = _last_block(raw)
    if last is None:
        raise ActionParseError("no fenced code block with an action")
    return raw[: last.start()].strip(), last.group(1).strip()


def _last_block(raw: str | None) -> re.Match | None:
    """The last fenced code block of an agent's output, or None."""
    matches = list(_FENCE.finditer(raw or ""))
    return matches[-1] if matches else None


def action_and_thought(raw: str, think: str | None = None) -> tuple[str, str | None]:
    """(action text, thought) of one recorded AgentLab step, in either format: the last fenced
    block of the agent's output (DemoAgent and older agents), else the whole text as the bare
    action string (GenericAgent, AgentLab 0.3+). The thought is the agent's own ``think`` when it
    has one, else the text around the block.

    Stricter than ``extract_action`` on purpose: a recorded action is what BrowserGym executed, so
    the reader parses this text whole and rejects it with the parser's reason, rather than picking
    one call out of prose."""
    raw = raw or ""
    last = _last_block(raw)
    if last is not None:
        action = last.group(1).strip()
        around = "\n".join(t for t in (raw[: last.start()].strip(), raw[last.end():].strip()) if t)
    else:
        action, around = raw.strip(), ""
    if isinstance(think, str) and think.strip():
        return action, think.strip()
    return action, around or None
