"""Load pickles from the outside world, admitting only the classes we expect.

AgentLab step files pickle ``browsergym.experiments.loop.StepInfo`` (and ``StepTimestamps``)
with numpy arrays inside. We never import BrowserGym to read them: those two classes are
replaced by a plain attribute holder, numpy's array reconstruction is allowed, and any other
global is refused, so a crafted pickle cannot run code.
"""

from __future__ import annotations

import gzip
import io
import pickle

ALLOWED_NUMPY = {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
}
ALLOWED_BUILTINS = {("builtins", n) for n in ("set", "frozenset", "complex", "bytearray", "slice", "range")}
BROWSERGYM_RECORDS = {("browsergym.experiments.loop", "StepInfo"),
                      ("browsergym.experiments.loop", "StepTimestamps")}


# Decompressed bytes a pickle may have by default: AgentLab step files decompress to about
# 0.25 MB (1.1 MB at most in the shared runs); screenshots kept in ``obs`` add a few MB each.
DEFAULT_MAX_DECOMPRESSED_MB = 256


class UnexpectedClassError(pickle.UnpicklingError):
    """The pickle names a class outside the allow-list."""


class TooLargeError(ValueError):
    """The decompressed pickle is larger than the cap (a decompression bomb, or a huge record)."""


class PickledRecord:
    """Stand-in for a pickled dataclass: its state becomes plain attributes."""

    __slots__ = ("_cls", "__dict__")

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"unexpected state of type {type(state).__name__}")
        self.__dict__.update(state)

    def __repr__(self):
        return f"<{getattr(self, '_cls', 'record')} {sorted(self.__dict__)}>"


def _record_class(module: str, name: str) -> type:
    return type(name, (PickledRecord,), {"__module__": module, "_cls": name})


class RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in BROWSERGYM_RECORDS:
            return _record_class(module, name)
        if (module, name) in ALLOWED_NUMPY:
            import numpy  # noqa: F401  (numpy resolves numpy.core -> numpy._core itself)
            return super().find_class(module, name)
        if (module, name) in ALLOWED_BUILTINS:
            return super().find_class(module, name)
        raise UnexpectedClassError(f"refused to load class {module}.{name}")


def load_restricted(data: bytes):
    """Unpickle ``data`` with the allow-list."""
    return RestrictedUnpickler(io.BytesIO(data)).load()


def read_gz_capped(path, max_bytes: int) -> bytes:
    """The decompressed bytes of a gzip file, decompressed as a stream that stops one byte past
    ``max_bytes`` (so a small file that expands to gigabytes never reaches memory); raises
    TooLargeError above the cap, OSError/EOFError on corrupt gzip."""
    data = bytearray()
    with gzip.open(path, "rb") as f:
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
    import os

    try:
        return f"{os.path.getsize(path) / 2**20:.2f} MB"
    except OSError:
        return "of unknown size"


def load_gz(path, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_MB * 2**20) -> object:
    """Read a gzip'd pickle with the allow-list, at most ``max_bytes`` decompressed (raises
    TooLargeError above it, OSError/EOFError on corrupt gzip)."""
    return load_restricted(read_gz_capped(path, max_bytes))
