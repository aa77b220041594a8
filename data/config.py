"""One mechanism for typed configuration: every dataclass field is a flag and a YAML key.

A stage's settings are a dataclass (``LLMConfig``, ``MineConfig``, ``VerifyConfig``,
``PRMTrainConfig``, ...) whose fields carry their help text in ``metadata={"help": ...}`` (as TRL
and transformers do). Mixing in :class:`Configurable` gives it

- ``add_args(parser, prefix="")``: one flag per field, ``--{prefix}{name-with-dashes}``, with its
  help and default; a nested dataclass field (``MineConfig.params``) adds its own fields' flags;
  ``FILE_FLAG`` (``--config``, ``--llm-config``) names a YAML file of the same settings;
- ``from_args(args, prefix="")``: defaults, then the YAML file, then the flags actually given;
- ``from_yaml(path)``: the file alone (unknown keys are refused, naming the known ones).

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
import re
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


def _default(f):
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _help(f) -> str:
    text = re.sub(r"%(?![%(])", "%%", f.metadata.get("help", ""))
    default = _default(f)
    if isinstance(default, bool):
        return text + (" (default: on)" if default else "")
    if default not in (None, "", (), []) and not isinstance(default, (dict, Enum)) and not is_dataclass(default):
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return text + f" (default: {shown})"
    return text


def add_dataclass_args(parser, cls, prefix: str = "", skip: tuple[str, ...] = ()) -> None:
    """One flag per field of ``cls`` (see the module doc); nested dataclass fields recurse."""
    for f in fields(cls):
        if not f.init or f.name in skip or f.name.startswith("_"):
            continue
        if _is_nested(cls, f):
            add_dataclass_args(parser, _hints(cls)[f.name], prefix, skip)
            continue
        tp, many = _unwrap(_hints(cls)[f.name])
        flag, dest, help_text = flag_name(f.name, prefix), dest_name(f.name, prefix), _help(f)
        if tp is bool:
            if f.name.startswith("no_"):
                on, off = flag, flag_name(f.name[3:], prefix)
            else:
                on, off = flag, flag_name("no_" + f.name, prefix)
            parser.add_argument(on, off, action=_Switch, off=off, dest=dest, default=None, help=help_text)
            continue
        if tp is dict or typing.get_origin(tp) is dict:
            continue                                   # YAML only
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
        parser.add_argument(flag, **kwargs)


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


def check_keys(data: dict, known, where: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown settings {unknown}; known: {sorted(known)}")


def build(cls, values: dict, where: str = "config"):
    """``cls(**values)`` with nested dataclass fields built from nested dicts; unknown keys are
    refused with the known ones named."""
    check_keys(values, [f.name for f in fields(cls) if f.init], where)
    kwargs = {}
    for name, value in values.items():
        f = next(f for f in fields(cls) if f.name == name)
        if _is_nested(cls, f) and isinstance(value, dict):
            value = build(_hints(cls)[name], value, f"{where}.{name}")
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
        """``--{prefix}{field}`` for every field (``skip``: fields another group already owns),
        and ``--{prefix}{FILE_FLAG} FILE`` when the class has one."""
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
