"""The allow-list unpickler admits today's AgentLab data classes (issue 23) as inert data, and no
allowed class can make it call code: each allowed name resolves to a stand-in defined in
``data/readers/safe_pickle.py``, to numpy's array reconstruction or to a plain builtin type, and
crafted pickles that try to reach anything else through them (constructor arguments, a state that
shadows ``__setstate__`` / ``extend`` / ``append`` / ``add``, dunder attributes, item assignment,
numpy with a stand-in subtype) run no Python code outside that module and numpy."""

import gc
import io
import pickle
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from data.readers import safe_pickle
from data.readers.safe_pickle import (
    ALLOWED_BUILTINS,
    ALLOWED_NUMPY,
    MESSAGE_CLASSES,
    RECORD_CLASSES,
    PickledMessage,
    PickledRecord,
    RestrictedUnpickler,
    UnexpectedClassError,
    load_gz,
    load_restricted,
)

FIXTURES = Path(__file__).parent / "fixtures" / "agentlab_layouts"
ALLOWED = sorted(RECORD_CLASSES | MESSAGE_CLASSES | ALLOWED_NUMPY | ALLOWED_BUILTINS)
NUMPY_DIR = str(Path(np.__file__).parent)


def test_todays_agentlab_classes_are_on_the_list():
    for name in ("BaseMessage", "SystemMessage", "HumanMessage", "AIMessage"):
        assert ("agentlab.llm.llm_utils", name) in MESSAGE_CLASSES
    for key in [("browsergym.experiments.agent", "AgentInfo"), ("agentlab.llm.llm_utils", "Discussion"),
                ("browsergym.experiments.loop", "StepInfo"), ("browsergym.experiments.loop", "StepTimestamps")]:
        assert key in RECORD_CLASSES
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        assert {(module, n) for n in ("_reconstruct", "ndarray", "dtype")} <= ALLOWED_NUMPY


def test_the_released_layouts_load_without_agentlab_or_browsergym():
    before = set(sys.modules)
    steps = [load_gz(p) for p in sorted(FIXTURES.glob("*/step_0.pkl.gz"))]
    assert len(steps) == 5
    loaded = set(sys.modules) - before
    assert not [m for m in loaded if m.split(".")[0] in ("agentlab", "browsergym")]
    assert not any(m.split(".")[0] in ("agentlab",) for m in sys.modules)
    generic = [s for s in steps if not isinstance(s.agent_info, dict)]
    assert len(generic) == 3
    for s in generic:
        assert isinstance(s, PickledRecord) and isinstance(s.agent_info, PickledRecord)
        chat = s.agent_info.chat_messages
        assert type(chat).__name__ == "Discussion" and isinstance(chat, PickledRecord)
        assert [type(m).__name__ for m in chat.messages] == ["SystemMessage", "HumanMessage", "AIMessage"]
        assert all(isinstance(m, PickledMessage) and isinstance(m, dict) for m in chat.messages)
        assert chat.messages[0] == {"role": "system", "content": "You are an agent."}
        assert isinstance(s.obs["active_page_index"], np.ndarray) and s.obs["active_page_index"].tolist() == [0]


@pytest.mark.parametrize("key", ALLOWED, ids=[".".join(k) for k in ALLOWED])
def test_every_allowed_name_resolves_to_inert_code(key):
    obj = RestrictedUnpickler(io.BytesIO(b"")).find_class(*key)
    if key in RECORD_CLASSES or key in MESSAGE_CLASSES:
        base = PickledRecord if key in RECORD_CLASSES else PickledMessage
        assert isinstance(obj, type) and issubclass(obj, base) and obj.__module__ == key[0]
        # every method it has is this module's, dict's or object's: nothing of AgentLab's
        for klass in obj.__mro__:
            assert klass in (object, dict) or klass.__dict__.get("__module__") in (safe_pickle.__name__, key[0])
            for name, attr in vars(klass).items():
                if callable(attr) and klass not in (object, dict):
                    assert attr.__module__ == safe_pickle.__name__, (klass, name)
    elif key in ALLOWED_NUMPY:
        multiarray = sys.modules.get("numpy._core.multiarray") or sys.modules["numpy.core.multiarray"]
        assert obj in (np.ndarray, np.dtype, multiarray._reconstruct, multiarray.scalar)
    else:
        assert obj in (set, frozenset, complex, bytearray, slice, range)


# -- crafted pickles (protocol 0/2 opcodes written by hand) ----------------------------------------
def _g(module, name):
    return f"c{module}\n{name}\n".encode()


def _s(text):
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


STEP = _g("browsergym.experiments.loop", "StepInfo")
INFO = _g("browsergym.experiments.agent", "AgentInfo")
MSG = _g("agentlab.llm.llm_utils", "HumanMessage")
NEW = b")\x81"                  # EMPTY_TUPLE, NEWOBJ: cls.__new__(cls)
SET = _g("builtins", "set")


def _state(key, value=SET):
    return b"}" + _s(key) + value + b"s"        # {key: value}


HOSTILE = {
    # a state that would shadow the method the unpickler looks up next
    "shadow_setstate": STEP + NEW + b"p0\n0g0\n" + _state("__setstate__") + b"bg0\n}b.",
    "shadow_extend": STEP + NEW + b"p0\n0g0\n" + _state("extend") + b"bg0\n(I1\ne.",
    "shadow_append": STEP + NEW + b"p0\n0g0\n" + _state("append") + b"bg0\n(I1\ne.",
    "shadow_add": INFO + NEW + b"p0\n0g0\n" + _state("add") + b"bg0\n(I1\n\x90.",
    "dunder_class": STEP + NEW + _state("__class__", _g("builtins", "frozenset")) + b"b.",
    "dunder_reduce": INFO + NEW + _state("__reduce_ex__") + b"b.",
    "dunder_dict": MSG + NEW + _state("__dict__", b"}") + b"b.",
    "non_string_key": STEP + NEW + b"}I1\nI2\nsb.",
    "state_not_a_dict": STEP + NEW + _s("x") + b"b.",
    "slots_pair_of_junk": STEP + NEW + _s("a") + _s("b") + b"\x86b.",
    # item assignment on a record: it has no __setitem__
    "setitem_on_record": STEP + NEW + _s("k") + _s("v") + b"s.",
    # numpy's reconstruct with a stand-in as the array subtype
    "reconstruct_record_subtype": _g("numpy.core.multiarray", "_reconstruct") + b"(" + STEP + b"(I0\nt"
                                  + _s("b") + b"tR.",
    # globals that are not on the list, however they are spelled
    "os_system": _g("os", "system") + b"(" + _s("true") + b"tR.",
    "builtins_eval": _g("builtins", "eval") + b"(" + _s("1") + b"tR.",
    "builtins_getattr": _g("builtins", "getattr") + b".",
    "dotted_name": _g("browsergym.experiments.loop", "StepInfo.__init__") + b".",
    "numpy_load": _g("numpy", "load") + b".",
    "numpy_attr_path": _g("numpy", "core.multiarray._reconstruct") + b".",
    "llm_utils_other": _g("agentlab.llm.llm_utils", "retry") + b".",
    "copyreg_reconstructor": _g("copyreg", "_reconstructor") + b".",
    "persistent_id": _s("x") + b"Q.",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_pickles_run_no_code_outside_the_module_and_numpy(name):
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_filename)
        elif event == "c_call":
            called.append(getattr(arg, "__qualname__", repr(arg)))

    error = None
    # A collection inside the profiled span would run finalizers of objects that earlier tests in
    # this process left behind (under xdist: an event loop's transport, asyncio/selector_events.py),
    # which is not code the pickle ran: collect first, and keep the collector off while profiling.
    gc.collect()
    gc.disable()
    sys.setprofile(profile)
    try:
        load_restricted(HOSTILE[name])
    except Exception as e:  # noqa: BLE001  (checked below, outside the profiled span)
        error = e
    finally:
        sys.setprofile(None)
        gc.enable()
    assert isinstance(error, (pickle.UnpicklingError, TypeError, ValueError)), error
    python_code = {c for c in called if c.endswith(".py")}
    assert python_code <= {safe_pickle.__file__} | {c for c in python_code if c.startswith(NUMPY_DIR)}, python_code
    if name in ("os_system", "builtins_eval", "builtins_getattr", "dotted_name", "numpy_load", "numpy_attr_path",
                "llm_utils_other", "copyreg_reconstructor"):
        assert isinstance(error, UnexpectedClassError)
    if name.startswith(("shadow_", "dunder_")):
        assert "refused state attribute" in str(error)


def test_constructor_arguments_reach_no_constructor():
    """REDUCE on a stand-in with arguments (what a pickle would use to run the real class's
    __init__): an empty, inert object."""
    for cls in (STEP, INFO, MSG):
        obj = load_restricted(cls + b"(" + _s("rm -rf /") + b"I1\ntR.")
        assert not vars(obj) and (not isinstance(obj, dict) or obj == {})


def test_stand_ins_are_made_per_load():
    a = load_restricted(STEP + NEW + _state("x", b"I1\n") + b"b.")
    b = load_restricted(STEP + NEW + b".")
    assert type(a) is not type(b) and a.x == 1 and not hasattr(b, "x")


def test_a_message_is_a_plain_dict_of_its_items():
    msg = load_restricted(MSG + NEW + b"(" + _s("role") + _s("user") + _s("content") + _s("hi") + b"u.")
    assert msg == {"role": "user", "content": "hi"} and type(msg).__name__ == "HumanMessage"
    assert type(msg).__init__ is PickledMessage.__init__ and type(msg).__setitem__ is dict.__setitem__
