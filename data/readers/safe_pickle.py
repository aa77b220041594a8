"""Load pickles from the outside world, admitting only the classes we expect.

AgentLab step files pickle BrowserGym's ``StepInfo`` (and ``StepTimestamps``), today's AgentLab
also the agent's ``AgentInfo`` and its prompt (``agentlab.llm.llm_utils.Discussion`` holding
``SystemMessage`` / ``HumanMessage`` / ``AIMessage``, dict subclasses), with numpy arrays inside.
We never import BrowserGym or AgentLab to read them: each of those classes is replaced by an inert
stand-in defined here (a plain attribute holder, or a plain dict for the messages), so no
constructor, ``__setstate__`` or ``__reduce__`` of theirs ever runs. numpy's array reconstruction
is allowed under both its numpy 1 (``numpy.core``) and numpy 2 (``numpy._core``) paths, and any
other global is refused, so a crafted pickle cannot run code.

What a pickle can make the unpickler call is exactly what ``find_class`` returns (plus the
methods the unpickler looks up on the objects it builds: ``__setstate__``, ``extend``/``append``,
``add``, item assignment). The stand-ins define those themselves, and their state may not shadow
them: a state key that is a dunder name or ``append``/``extend``/``add`` is refused.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import pickle
import stat

# Data classes AgentLab / BrowserGym pickle into step files, read as inert attribute holders.
# BrowserGym 0.10-0.14 (browsergym.experiments.loop); AgentLab 0.4 moved the loop into its own
# package (agentlab.experiments.loop) with the same fields.
RECORD_CLASSES = frozenset({
    ("browsergym.experiments.loop", "StepInfo"), ("browsergym.experiments.loop", "StepTimestamps"),
    ("browsergym.experiments.agent", "AgentInfo"),
    ("agentlab.experiments.loop", "StepInfo"), ("agentlab.experiments.loop", "StepTimestamps"),
    ("agentlab.llm.llm_utils", "Discussion"),
})
# AgentLab's chat messages (``class BaseMessage(dict)`` and its subclasses), read as plain dicts.
MESSAGE_CLASSES = frozenset(("agentlab.llm.llm_utils", n)
                            for n in ("BaseMessage", "SystemMessage", "HumanMessage", "AIMessage"))
# numpy's pickled arrays and scalars, under numpy 1's and numpy 2's module paths.
_NUMPY_MODULES = ("numpy", "numpy.core.multiarray", "numpy._core.multiarray")
ALLOWED_NUMPY = frozenset({(m, n) for m in _NUMPY_MODULES for n in ("ndarray", "dtype")}
                          | {(m, n) for m in _NUMPY_MODULES[1:] for n in ("_reconstruct", "scalar")})
ALLOWED_BUILTINS = frozenset(("builtins", n) for n in ("set", "frozenset", "complex", "bytearray", "slice", "range"))

# Decompressed bytes a pickle may have by default: AgentLab step files decompress to about
# 0.25 MB (1.1 MB at most in the shared runs); screenshots kept in ``obs`` add a few MB each.
DEFAULT_MAX_DECOMPRESSED_MB = 256
# Names the unpickler looks up on the objects it builds (BUILD, APPENDS, ADDITEMS): a stand-in's
# state may not shadow them with an instance attribute.
_RESERVED = frozenset({"append", "extend", "add"})


class UnexpectedClassError(pickle.UnpicklingError):
    """The pickle names a class outside the allow-list."""


class TooLargeError(ValueError):
    """The decompressed pickle is larger than the cap (a decompression bomb, or a huge record)."""


class NotRegularFileError(OSError):
    """The path is not a regular file (a FIFO, a device such as /dev/zero, a socket, a folder)."""


def _checked_state(state) -> dict:
    """A pickled object's state as a dict of plain attribute names; refuses anything else."""
    if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
        a, b = state
        if not (a is None or isinstance(a, dict)) or not (b is None or isinstance(b, dict)):
            raise pickle.UnpicklingError("unexpected (state, slots) pair")
        state = {**(a or {}), **(b or {})}
    if not isinstance(state, dict):
        raise pickle.UnpicklingError(f"unexpected state of type {type(state).__name__}")
    for key in state:
        if not isinstance(key, str) or (key.startswith("__") and key.endswith("__")) or key in _RESERVED:
            raise pickle.UnpicklingError(f"refused state attribute {key!r}")
    return state


class PickledRecord:
    """Inert stand-in for a pickled data class (StepInfo, AgentInfo, ...): its state becomes
    plain attributes; nothing of the original class runs."""

    _cls = "record"

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.__dict__.update(_checked_state(state))

    def __repr__(self):
        return f"<{self._cls} {sorted(self.__dict__)}>"


class PickledMessage(dict):
    """Inert stand-in for AgentLab's chat messages (dict subclasses): their items, as a dict."""

    _cls = "message"

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.__dict__.update(_checked_state(state))


class RestrictedUnpickler(pickle.Unpickler):
    """The allow-list. Stand-in classes are made per unpickler, so nothing one pickle does to them
    reaches another load."""

    def __init__(self, file):
        super().__init__(file)
        self._stand_ins: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str):
        key = (module, name)
        if key in RECORD_CLASSES or key in MESSAGE_CLASSES:
            if key not in self._stand_ins:
                base = PickledRecord if key in RECORD_CLASSES else PickledMessage
                self._stand_ins[key] = type(name, (base,), {"__module__": module, "__qualname__": name, "_cls": name})
            return self._stand_ins[key]
        if key in ALLOWED_NUMPY:
            return _numpy_global(name)
        if key in ALLOWED_BUILTINS:
            return _BUILTINS[name]
        raise UnexpectedClassError(f"refused to load class {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent ids are not allowed")


_BUILTINS = {"set": set, "frozenset": frozenset, "complex": complex, "bytearray": bytearray, "slice": slice,
             "range": range}


def _numpy_global(name: str):
    """The running numpy's own object for a pickled numpy 1 or numpy 2 name (no module is imported
    by the name the pickle gives)."""
    import numpy

    if name == "ndarray":
        return numpy.ndarray
    if name == "dtype":
        return numpy.dtype
    try:
        from numpy._core import multiarray
    except ImportError:      # numpy 1
        from numpy.core import multiarray
    return {"_reconstruct": multiarray._reconstruct, "scalar": multiarray.scalar}[name]


def load_restricted(data: bytes):
    """Unpickle ``data`` with the allow-list."""
    return RestrictedUnpickler(io.BytesIO(data)).load()


def open_regular(path, max_bytes: int | None = None):
    """Open ``path`` for reading only if it is a regular file (symlinks followed) of at most
    ``max_bytes``: a FIFO, a device (``/dev/zero``) or a socket raises NotRegularFileError, never
    blocks; a bigger file raises TooLargeError. The open itself does not block on a FIFO swapped in
    after the check (O_NONBLOCK), and the descriptor is checked again."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", str(path))
        if max_bytes is not None and st.st_size > max_bytes:
            raise TooLargeError(f"the file is {st.st_size / 2**20:.2f} MB, more than {max_bytes / 2**20:g} MB")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a plain file"


def read_regular(path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (see ``open_regular``); reads stop one
    byte past the cap even if the file grows meanwhile."""
    with open_regular(path, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLargeError(f"the file is more than {max_bytes / 2**20:g} MB")
    return data


def read_gz_capped(path, max_bytes: int) -> bytes:
    """The decompressed bytes of a gzip file, decompressed as a stream that stops one byte past
    ``max_bytes`` (so a small file that expands to gigabytes never reaches memory); raises
    TooLargeError above the cap, NotRegularFileError for a FIFO or device, OSError/EOFError on
    corrupt gzip."""
    data = bytearray()
    with open_regular(path) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as f:
        while len(data) <= max_bytes:
            chunk = f.read(min(_CHUNK, max_bytes + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    if len(data) > max_bytes:
        raise TooLargeError(f"decompresses to more than {max_bytes / 2**20:g} MB "
                            f"(--max-decompressed-mb; the file is {_size(path)})")
    return bytes(data)


_CHUNK = 1 << 20


def _size(path) -> str:
    try:
        return f"{os.path.getsize(path) / 2**20:.2f} MB"
    except OSError:
        return "of unknown size"


def load_gz(path, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_MB * 2**20) -> object:
    """Read a gzip'd pickle with the allow-list, at most ``max_bytes`` decompressed (raises
    TooLargeError above it, NotRegularFileError for a FIFO or device, OSError/EOFError on corrupt
    gzip)."""
    return load_restricted(read_gz_capped(path, max_bytes))
