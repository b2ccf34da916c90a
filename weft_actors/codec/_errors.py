"""Failures inside the codec and the ``SerializationError`` messages they become.

A ``_Failure`` carries the offending type and a reason up from any depth to ``encode`` or
``decode``, which add the caller's label (``where``) and, when encoding, the path to the
offending part; that path is searched for only after a failure, never on the way.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import msgpack

from weft_actors.errors import SerializationError

_TOO_DEEP = "nested too deeply"

_MISSING: Any = object()


class _Failure(Exception):
    """Internal: carries a failure up to the public entry point, which adds ``where``."""

    def __init__(self, type_name: str | None, reason: str, target: object = _MISSING) -> None:
        super().__init__(reason)
        self.type_name = type_name
        self.reason = reason
        self.target = target


def _type_name(cls: type) -> str:
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", "?")
    if not module or module == "builtins":
        return str(qualname)
    return f"{module}.{qualname}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (RecursionError, msgpack.StackError)) or (
        isinstance(exc, ValueError) and "recursion limit" in str(exc)
    ):
        return _TOO_DEEP
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _encode_error(type_name: str, where: str, reason: str, path: str | None) -> SerializationError:
    if path and len(path) > 160:
        tail = path[-100:]
        path = path[:60] + "..." + tail[tail.find("[") if "[" in tail else 0 :]
    location = f"{where}, at {path}" if path else where
    return SerializationError(
        f"cannot encode a value of type {type_name!r} ({location}): {reason}",
        type_name=type_name,
        where=where,
        path=path,
    )


def _decode_error(type_name: str | None, where: str, reason: str) -> SerializationError:
    what = f"a value of type {type_name!r}" if type_name else "a value"
    return SerializationError(
        f"cannot decode {what} ({where}): {reason}", type_name=type_name, where=where
    )


def _short(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{_type_name(type(value))}>"
    return text if len(text) <= 40 else text[:37] + "..."


def _children(node: object) -> list[tuple[str, object]]:
    if isinstance(node, dict):
        out: list[tuple[str, object]] = []
        for key, value in node.items():
            out.append((f"[{_short(key)}]", value))
            out.append((f"<key {_short(key)}>", key))
        return out
    if isinstance(node, (list, tuple)):
        return [(f"[{i}]", item) for i, item in enumerate(node)]
    if isinstance(node, (set, frozenset)):
        return [("<element>", item) for item in node]
    if isinstance(node, enum.Enum):
        return [(".value", node.value)]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [
            (f".{f.name}", getattr(node, f.name, None)) for f in dataclasses.fields(node)
        ]
    return []


def _find_path(root: object, target: object) -> str | None:
    """Where ``target`` sits inside ``root`` (e.g. ``['a'][2].field``); only used on failure."""
    if root is target:
        return None
    try:
        stack: list[tuple[object, str]] = [(root, "")]
        seen: set[int] = set()
        budget = 100_000
        while stack and budget > 0:
            budget -= 1
            node, path = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for label, child in _children(node):
                if child is target:
                    return path + label
                stack.append((child, path + label))
    except Exception:
        pass
    return None
