"""Typed TOML tables: dataclasses built from TOML with every key checked.

Shared by cluster profiles and the daemon's configuration: unknown keys are rejected with
an error naming the valid ones, values are checked against the field types (int, bool,
str, Literal, Optional), so that a typo never silently falls back to a default.
Integers are non-negative unless their field says ``metadata={"signed": True}``, and
always within SQLite's and Python's C integers (64-bit).
"""

from __future__ import annotations

import tomllib
import types
import typing
from collections.abc import Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Literal, TypeVar


class SchemaError(ValueError):
    """A TOML document does not follow its schema (or cannot be read)."""


T = TypeVar("T")

#: The largest integer a TOML value may hold here (SQLite stores 64-bit signed integers).
INT_MAX = 2**63 - 1


def _check_value(where: str, key: str, value: Any, hint: Any, *, signed: bool = False) -> Any:
    """Check one TOML value against a dataclass field's type (int, bool, str, Literal, Optional)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        if value not in typing.get_args(hint):
            allowed = ", ".join(repr(a) for a in typing.get_args(hint))
            raise SchemaError(f"{where}: {key} = {value!r} is not one of {allowed}")
        return value
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _check_value(where, key, value, inner[0], signed=signed)
    # bool is a subclass of int: keep them apart so that `nodes = true` is an error
    ok = isinstance(value, hint) and (hint is bool or not isinstance(value, bool))
    if not ok:
        raise SchemaError(
            f"{where}: {key} must be {hint.__name__}, got {type(value).__name__} {value!r}"
        )
    if hint is int and value < 0 and not signed:
        raise SchemaError(f"{where}: {key} must not be negative, got {value}")
    if hint is int and abs(value) > INT_MAX:
        raise SchemaError(f"{where}: {key} = {value} is out of range (at most {INT_MAX})")
    return value


def build(cls: type[T], data: Any, where: str, nested: dict[str, Any] | None = None) -> T:
    """Instantiate a flat dataclass from a TOML table, rejecting unknown and missing keys."""
    if not isinstance(data, dict):
        raise SchemaError(f"{where} must be a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise SchemaError(
            f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}"
        )
    kwargs: dict[str, Any] = dict(nested or {})
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in kwargs:
            continue
        if f.name in data:
            signed = bool(f.metadata.get("signed"))
            kwargs[f.name] = _check_value(where, f.name, data[f.name], hints[f.name], signed=signed)
        elif f.default is MISSING and f.default_factory is MISSING:
            raise SchemaError(f"{where}: required key {f.name!r} is missing")
    return cls(**kwargs)


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """Parse a TOML file; unreadable or invalid files raise one clear SchemaError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SchemaError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not valid TOML: not UTF-8 text ({exc.reason})") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SchemaError(f"{path}: not valid TOML: {exc}") from exc


def read_one_table(path: Path, what: str, name: str, keys: Sequence[str]) -> dict[str, Any]:
    """The one table ``[name]`` a small file holds (a cluster's ``policy.toml``,
    ``plan.toml``): SchemaError for anything else in the file or a key not in ``keys``."""
    data = read_toml(path, what)
    table = data.get(name)
    if set(data) != {name} or not isinstance(table, dict):
        raise SchemaError(f"{path}: needs one [{name}] table and nothing else")
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise SchemaError(
            f"{path} [{name}]: unknown key(s) {', '.join(unknown)}; valid: {', '.join(keys)}"
        )
    return dict(table)
