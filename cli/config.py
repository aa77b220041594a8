"""One mechanism for typed configuration: every dataclass field is a flag and a YAML key.

A stage's settings are a dataclass (``LLMConfig``, ``MineConfig``, ``VerifyConfig``,
``PRMTrainConfig``, ...) whose fields carry their help text in ``metadata={"help": ...}`` (as TRL
and transformers do). Mixing in :class:`Configurable` gives it

- ``add_args(parser, prefix="")``: one flag per field, ``--{prefix}{name-with-dashes}``, with its
  help and default; a nested dataclass field (``MineConfig.params``) adds its own fields' flags;
  ``FILE_FLAG`` (``--config``, ``--llm-config``) names a YAML file of the same settings;
- ``from_args(args, prefix="")``: defaults, then the YAML file, then the flags actually given;
- ``from_yaml(path)``: the file alone (unknown keys are refused, naming the known ones).

**Every ``python -m`` command follows one convention**, which ``tests/test_cli_config.py`` checks
for each entry point (a module with ``if __name__ == "__main__"``):

- the module defines ``build_parser() -> CLIParser`` (from :func:`make_parser`), and ``main(argv)``
  starts with ``args = build_parser().parse_args(argv)``;
- its flags come from ``Cls.add_args(parser, prefix)`` calls, which record ``(Cls, prefix, skip)``
  in ``parser.configs``; at most one flag (or positional) per parser or subcommand is written by
  hand. A command's own options (``--run``, ``--workers``, ``--quiet``) are a small dataclass of
  their own next to ``main``; a field without a default is a required flag::

      @dataclass
      class MineCommand(Configurable):
          run: str = field(metadata={"help": "run directory holding the graphs"})      # --run, required
          workers: int | None = field(default=None, metadata={"min": 1, "help": "processes"})

      def build_parser(prog="python -m proposals.mine", doc=__doc__) -> CLIParser:
          ap = make_parser(prog, doc)
          MineCommand.add_args(ap); MineConfig.add_args(ap); LLMConfig.add_args(ap, prefix="fill-")
          return ap

- a flow's command reuses its stage's ``build_parser`` (or the same ``add_args`` calls), and the
  flow takes the stage's dataclasses as parameters: no default is typed twice;
- a renamed field keeps its old flag and YAML key: ``metadata={"deprecated": ("budget",)}`` on
  ``sample_size`` still accepts ``--budget 8`` and ``budget: 8``, with a ``warning:`` line on
  stderr naming ``--sample-size``.

The same rules hold for every flag of every command:

- **Booleans are switches**: ``--x`` turns a setting on and ``--no-x`` turns it off (both always
  exist; a field named ``no_x``, like ``no_graph``, reads the same way round: ``--no-graph`` sets
  it, ``--graph`` clears it). In YAML they are ``true``/``false``.
- A flag left out changes nothing: it parses to ``None`` and the file's value or the default
  stands, so ``from_args`` and :func:`given_names` can tell a given ``--max-tokens 256`` from the
  default 256.
- Lists take one or more values and may be repeated (``--format trl --format webprmbench``);
  ``metadata={"type": fn}`` parses a field's text its own way (``--axes spatial,temporal``);
  ``metadata={"choices": (...)}`` or a ``Literal`` type restricts the values; ``dict`` fields
  are YAML only.
- **Numbers are range-checked where they are parsed** (a flag, a YAML value, ``check_ranges``):
  ``metadata={"min": 0}``, ``{"max": 1}`` and ``{"gt": 0}`` (exclusive) bound a field; a float
  must be finite (``{"finite": False}`` allows NaN/inf) and an int must fit in 64 bits, so a
  ``--temperature nan`` or ``--seed 100000000000000000000000`` is a one-line error before any
  work, not a crash at the write after every paid call.

Why a helper of our own and not ``transformers.HfArgumentParser`` / ``trl.TrlParser``: the
search CLIs take two LLM configs in one parser (``--prm-model``, ``--policy-model``), which
HfArgumentParser cannot prefix; its flags always carry the default, so a flag left out would
overwrite the ``--llm-config`` file and "was ``--max-tokens`` given?" could not be answered; its
booleans are ``--x [true|false]`` with ``--no-x`` only when the default is true; and TrlParser's
``--config`` YAML is flat, while the PRM recipes keep their ``model``/``data``/``train``
sections. ``PRMTrainConfig`` still *is* TRL's ``SFTConfig`` (a subclass): this module only turns
fields into flags and files into fields, for TRL's dataclasses as for ours.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

import yaml

_TYPE_HINTS: dict[type, dict] = {}


class _Switch(argparse.Action):
    """``--x`` / ``--no-x`` for one boolean field: the option string used says which."""

    def __init__(self, option_strings, dest, off: str, default=None, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)
        self.off = off

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string != self.off)

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


def deprecation(old: str, new: str) -> None:
    """The line a renamed flag or YAML key prints, naming what to use instead."""
    print(f"warning: {old} is deprecated and will be removed; use {new}", file=sys.stderr)


def _deprecated(action_cls, new: str | dict[str, str]):
    """``action_cls`` that first warns that the option string used is an old name of ``new`` (for
    a switch: a mapping from each old option string to its new one)."""
    class Deprecated(action_cls):
        def __call__(self, parser, namespace, values, option_string=None):
            deprecation(option_string, new[option_string] if isinstance(new, dict) else new)
            super().__call__(parser, namespace, values, option_string)
    return Deprecated


def flag_name(name: str, prefix: str = "") -> str:
    return f"--{prefix}{name.replace('_', '-')}"


def dest_name(name: str, prefix: str = "") -> str:
    return prefix.replace("-", "_") + name


def _hints(cls) -> dict:
    if cls not in _TYPE_HINTS:
        _TYPE_HINTS[cls] = typing.get_type_hints(cls)
    return _TYPE_HINTS[cls]


def _unwrap(tp) -> tuple[Any, bool]:
    """(the type a flag parses to, whether it takes several values)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        lists = [a for a in args if typing.get_origin(a) in (list, tuple)]
        if lists:                                # None | str | list[str]: several values
            return _unwrap(lists[0])
        if len(args) == 1:                       # X | None
            return _unwrap(args[0])
        return str, False                        # SchedulerType | str, dict | str (JSON), int | str: text
    if origin in (list, tuple):
        inner = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return (inner[0] if inner else str), True
    return tp, False


def _is_nested(cls, f) -> bool:
    tp = _hints(cls).get(f.name)
    return isinstance(tp, type) and is_dataclass(tp)


def _required(f) -> bool:
    """A field without a default is a required flag (a command's ``--run``)."""
    return f.default is MISSING and f.default_factory is MISSING


def _default(f):
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def field_help(f) -> str:
    """A field's flag help: its ``metadata["help"]`` and its default."""
    # argparse formats help with %: escape each lone % (TRL's texts already double some: "~20%% slower")
    text = re.sub(r"%(?!\()", "%%", f.metadata.get("help", "").replace("%%", "%"))
    default = _default(f)
    if isinstance(default, bool):
        return text + (" (default: on)" if default else "")
    if default not in (None, "", (), []) and not isinstance(default, (dict, Enum)) and not is_dataclass(default):
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return text + f" (default: {shown})"
    return text


INT64 = (-(2**63), 2**63 - 1)       # what Parquet, JSON readers and servers take as an integer


def range_problem(f, value) -> str | None:
    """Why ``value`` is out of field ``f``'s range (see the module doc), or None when it is in."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    meta = f.metadata
    if isinstance(value, float) and meta.get("finite", True) and not math.isfinite(value):
        return f"must be a finite number, not {value}"
    if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
        return f"must fit in 64 bits, not a {value.bit_length()}-bit number"
    if "min" in meta and value < meta["min"]:
        return f"must be >= {meta['min']}, not {value}"
    if "gt" in meta and value <= meta["gt"]:
        return f"must be > {meta['gt']}, not {value}"
    if "max" in meta and value > meta["max"]:
        return f"must be <= {meta['max']}, not {value}"
    return None


def _ranged(parse, f):
    """``parse`` (a flag's type) followed by the field's range check, as argparse reports it."""
    def parse_in_range(text: str):
        value = parse(text)
        problem = range_problem(f, value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    parse_in_range.__name__ = getattr(parse, "__name__", "value")      # argparse names it on a bad value
    return parse_in_range


def check_ranges(obj, where: str = "config") -> None:
    """ValueError naming the first field of dataclass ``obj`` (nested ones too) out of its range:
    for settings built in Python rather than from flags or a file."""
    for f in fields(obj):
        value = getattr(obj, f.name, None)
        if is_dataclass(value) and not isinstance(value, type):
            check_ranges(value, f"{where}.{f.name}")
            continue
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if (problem := range_problem(f, v)):
                raise ValueError(f"{where}: {f.name} {problem}")


def flag_fields(cls, skip: tuple[str, ...] = ()):
    """(field, the type its flag parses to, whether it takes several values) of every field of
    ``cls`` that is a flag: nested dataclasses' fields included, ``skip``, private and ``dict``
    (YAML only) fields left out."""
    for f in fields(cls):
        if not f.init or f.name in skip or f.name.startswith("_"):
            continue
        if _is_nested(cls, f):
            yield from flag_fields(_hints(cls)[f.name], skip)
            continue
        tp, many = _unwrap(_hints(cls)[f.name])
        if not (tp is dict or typing.get_origin(tp) is dict):
            yield f, tp, many


def add_dataclass_args(parser, cls, prefix: str = "", skip: tuple[str, ...] = ()) -> None:
    """One flag per field of ``cls`` (see the module doc); nested dataclass fields recurse."""
    for f, tp, many in flag_fields(cls, skip):
        flag, dest, help_text = flag_name(f.name, prefix), dest_name(f.name, prefix), field_help(f)
        old_names = [n for n in f.metadata.get("deprecated", ()) if n not in skip]   # skip: an old name taken here
        if tp is bool:
            switches = [(flag_name(n, prefix), flag_name(n[3:] if n.startswith("no_") else "no_" + n, prefix))
                        for n in (f.name, *old_names)]
            for i, (on, off) in enumerate(switches):
                action = _Switch if i == 0 else _deprecated(_Switch, {on: switches[0][0], off: switches[0][1]})
                parser.add_argument(on, off, action=action, off=off, dest=dest, default=None,
                                    help=help_text if i == 0 else argparse.SUPPRESS)
            continue
        kwargs: dict[str, Any] = {"dest": dest, "default": None, "help": help_text,
                                  "metavar": f.metadata.get("metavar", f.name.upper())}
        if "type" in f.metadata:
            kwargs["type"] = f.metadata["type"]
            many = False
        elif typing.get_origin(tp) is typing.Literal:
            kwargs["choices"] = typing.get_args(tp)
        elif isinstance(tp, type) and issubclass(tp, Enum):
            kwargs["choices"] = [e.value for e in tp]
        elif tp in (int, float, str):
            kwargs["type"] = tp
        else:
            kwargs["type"] = str
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
        if "choices" in kwargs and "metavar" not in f.metadata:
            del kwargs["metavar"]                      # --help lists the choices instead
        if many:       # one or more values, repeatable; metadata nargs="*": the flag alone means []
            kwargs.update(nargs=f.metadata.get("nargs", "+"), action="extend")
        if "type" in kwargs:
            kwargs["type"] = _ranged(kwargs["type"], f)
        if _required(f):
            kwargs["required"] = True
        parser.add_argument(flag, **kwargs)
        for name in old_names:         # the old flags: hidden from --help, a warning when used
            hidden = {**kwargs, "help": argparse.SUPPRESS, "required": False,
                      "action": _deprecated(argparse._ExtendAction if many else argparse._StoreAction, flag)}
            parser.add_argument(flag_name(name, prefix), **hidden)


def given(args: argparse.Namespace, cls, prefix: str = "") -> dict:
    """The fields of ``cls`` set on the command line (nested dataclasses as nested dicts)."""
    out: dict = {}
    for f in fields(cls):
        if not f.init:
            continue
        if _is_nested(cls, f):
            inner = given(args, _hints(cls)[f.name], prefix)
            if inner:
                out[f.name] = inner
            continue
        value = getattr(args, dest_name(f.name, prefix), None)
        if value is not None:
            out[f.name] = tuple(value) if isinstance(_default(f), tuple) and isinstance(value, list) else value
    return out


def renamed(cls, data: dict, where: str) -> dict:
    """``data`` with the old names of ``cls``'s fields (``metadata["deprecated"]``) replaced by
    the new ones, each with its warning; both names at once is an error."""
    out = dict(data)
    for f in fields(cls):
        for old in f.metadata.get("deprecated", ()):
            if old in out:
                if f.name in out:
                    raise ValueError(f"{where}: {old!r} is the old name of {f.name!r}; give only {f.name!r}")
                deprecation(f"{where}: the setting {old!r}", repr(f.name))
                out[f.name] = out.pop(old)
    return out


def check_keys(data: dict, known, where: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown settings {unknown}; known: {sorted(known)}")


def build(cls, values: dict, where: str = "config"):
    """``cls(**values)`` with nested dataclass fields built from nested dicts; unknown keys are
    refused with the known ones named (old names of renamed fields: :func:`renamed`)."""
    values = renamed(cls, values, where)
    check_keys(values, [f.name for f in fields(cls) if f.init], where)
    kwargs = {}
    for name, value in values.items():
        f = next(f for f in fields(cls) if f.name == name)
        if _is_nested(cls, f) and isinstance(value, dict):
            value = build(_hints(cls)[name], value, f"{where}.{name}")
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if (problem := range_problem(f, v)):
                raise ValueError(f"{where}: {name} {problem}")
        kwargs[name] = value
    return cls(**kwargs)


def merge(base: dict, top: dict) -> dict:
    """``top`` over ``base``, nested dicts merged key by key."""
    out = dict(base)
    for k, v in top.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_yaml(path: str | Path) -> dict:
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of settings, not {type(data).__name__}")
    return data


class Configurable:
    """Mixin for a dataclass of settings: flags and YAML by the rules of this module."""

    FILE_FLAG: ClassVar[str | None] = None   # e.g. "llm-config": --{prefix}llm-config FILE
    YAML_KEY: ClassVar[str | None] = None    # e.g. "llm": a shared file may nest the settings under it
    ARG_GROUP: ClassVar[str | None] = None   # title of the flags' group in --help

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser, prefix: str = "", skip: tuple[str, ...] = ()) -> None:
        """``--{prefix}{field}`` for every field (``skip``: fields, or old names of renamed
        fields, that another group already owns), and ``--{prefix}{FILE_FLAG} FILE`` when the
        class has one."""
        parser.__dict__.setdefault("configs", []).append((cls, prefix, skip))     # for tests/test_cli_config.py
        title = cls.ARG_GROUP or cls.__name__
        group = parser.add_argument_group(f"{prefix}{title}" if prefix else title)
        if cls.FILE_FLAG:
            group.add_argument(flag_name(cls.FILE_FLAG.replace("-", "_"), prefix), metavar="FILE",
                               dest=dest_name(cls.FILE_FLAG.replace("-", "_"), prefix),
                               help="YAML file with any of these settings (flags override it)")
        add_dataclass_args(group, cls, prefix, skip)

    @classmethod
    def file_values(cls, data: dict, where: str) -> dict:
        """A file's mapping as field values (checked); subclasses with sections flatten here."""
        if cls.YAML_KEY and isinstance(data.get(cls.YAML_KEY), dict):
            data = data[cls.YAML_KEY]
        data = renamed(cls, data, where)
        check_keys(data, [f.name for f in fields(cls) if f.init], where)
        return data

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict | None = None):
        """The settings in a YAML file; ``overrides`` (same shape as the file) on top."""
        values = cls.file_values(read_yaml(path), str(path))
        if overrides:
            values = merge(values, cls.file_values(overrides, "overrides"))
        return build(cls, values, str(path))

    @classmethod
    def file_path(cls, args: argparse.Namespace, prefix: str = "") -> str | None:
        return getattr(args, dest_name(cls.FILE_FLAG.replace("-", "_"), prefix), None) if cls.FILE_FLAG else None

    @classmethod
    def from_args(cls, args: argparse.Namespace, prefix: str = ""):
        """Defaults, then the ``FILE_FLAG`` file, then the flags given."""
        path = cls.file_path(args, prefix)
        values = cls.file_values(read_yaml(path), path) if path else {}
        return build(cls, merge(values, given(args, cls, prefix)), path or "flags")

    @classmethod
    def given_names(cls, args: argparse.Namespace, prefix: str = "") -> set[str]:
        """The top-level fields set explicitly, by a flag or in the ``FILE_FLAG`` file."""
        path = cls.file_path(args, prefix)
        from_file = set(cls.file_values(read_yaml(path), path)) if path else set()
        return from_file | set(given(args, cls, prefix))


class CLIParser(argparse.ArgumentParser):
    """The parser of every command: no prefix matching (``--learning-rat`` is not taken for
    ``--learning-rate``), and a mistake is answered in a line or two, with the closest flags
    ("did you mean --learning-rate?"), not with a usage that runs to a hundred lines."""

    USAGE_LINES = 4      # a usage longer than this is left to --help

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def option_strings(self) -> list[str]:
        return sorted(s for s in self._option_string_actions if s.startswith("--"))

    def suggest(self, flag: str) -> list[str]:
        """The known flags closest to an unknown ``flag`` (``--x=1`` counts as ``--x``): those it
        abbreviates first, then the most similar names."""
        import difflib

        name = flag.split("=", 1)[0].removeprefix("--")
        known = [s.removeprefix("--") for s in self.option_strings()]
        close = [k for k in known if name and k.startswith(name)][:3]
        close += [k for k in difflib.get_close_matches(name, known, n=3, cutoff=0.6) if k not in close]
        return ["--" + k for k in close[:3]]

    def error(self, message: str):
        hints = []
        if message.startswith("unrecognized arguments: "):
            for token in message.removeprefix("unrecognized arguments: ").split():
                if token.startswith("--") and (close := self.suggest(token)):
                    hints.append(f"{token.split('=', 1)[0]}: did you mean {' or '.join(close)}?")
        usage = self.format_usage()
        if usage.count("\n") <= self.USAGE_LINES:
            self._print_message(usage, sys.stderr)
        text = f"{self.prog}: error: {message}\n" + "".join(f"  {h}\n" for h in hints)
        if usage.count("\n") > self.USAGE_LINES:
            text += f"  ({self.prog} --help lists every option)\n"
        self.exit(2, text)


def make_parser(prog: str | None = None, doc: str | None = None, **kwargs) -> CLIParser:
    """The parser of a ``python -m`` command: ``prog`` as the user types it, the first paragraph
    of the module's ``doc`` as its description (see :class:`CLIParser`)."""
    if doc and "description" not in kwargs:
        kwargs["description"] = doc.strip().split("\n\n")[0]
    return CLIParser(prog=prog, **kwargs)
