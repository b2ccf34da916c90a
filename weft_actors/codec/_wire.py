"""The wire format's shared parts: extension type codes, nesting limits, class references.

Types outside msgpack's own model travel as extension types; every payload
below is itself msgpack unless marked otherwise::

    code  type                  payload
    ----  --------------------  ------------------------------------------------
      1   int beyond 64 bits    raw bytes: big-endian two's complement
      2   tuple                 array of the elements
      3   set                   array of the elements, sorted by their encoding
      4   frozenset             (as set) -- so the bytes never depend on hash seeds
      5   datetime.datetime     [year, month, day, hour, minute, second, us, fold, tz]
      6   datetime.date         raw bytes: proleptic ordinal, 4 bytes big-endian
      7   datetime.time         [hour, minute, second, us, fold, tz]
      8   datetime.timedelta    [days, seconds, microseconds]
      9   decimal.Decimal       raw bytes: ASCII ``str(value)``
     10   uuid.UUID             raw bytes: the 16 bytes
     11   enum.Enum member      [module, qualname, value]
     12   dataclass instance    [module, qualname, {field: value}]
     13   pydantic v2 model     [module, qualname, model_dump(mode="python")]
     14   named tuple           [module, qualname, [elements]]
     15   (reserved)

    tz = None | "Zone/Key" (a zoneinfo.ZoneInfo) | [offset_us, name or None] (fixed)

Also here: the nesting limits (``_MAX_DEPTH`` binds both directions alike), the per-thread
state that counts against them, and classes as (module, qualname) references, checked when
encoding and looked up in the type registry when decoding.

The registry is what makes decoding safe for payloads from anyone who can reach the front
door: a type tag is only ever looked up, never imported, so a payload can construct only a
class this process has registered -- by encoding a value of it, by ``register_type`` (a class
or a whole module), or because the engine scanned the app module it serves. An unknown tag is
a ``SerializationError`` for that one value.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import threading
from typing import Any

import msgpack

from ._errors import _MISSING, _Failure, _describe, _type_name

_EXT_BIGINT = 1
_EXT_TUPLE = 2
_EXT_SET = 3
_EXT_FROZENSET = 4
_EXT_DATETIME = 5
_EXT_DATE = 6
_EXT_TIME = 7
_EXT_TIMEDELTA = 8
_EXT_DECIMAL = 9
_EXT_UUID = 10
_EXT_ENUM = 11
_EXT_DATACLASS = 12
_EXT_PYDANTIC = 13
_EXT_NAMEDTUPLE = 14

_EXT_NAMES = {
    _EXT_BIGINT: "int",
    _EXT_TUPLE: "tuple",
    _EXT_SET: "set",
    _EXT_FROZENSET: "frozenset",
    _EXT_DATETIME: "datetime.datetime",
    _EXT_DATE: "datetime.date",
    _EXT_TIME: "datetime.time",
    _EXT_TIMEDELTA: "datetime.timedelta",
    _EXT_DECIMAL: "decimal.Decimal",
    _EXT_UUID: "uuid.UUID",
    _EXT_ENUM: "enum",
    _EXT_DATACLASS: "dataclass",
    _EXT_PYDANTIC: "pydantic model",
    _EXT_NAMEDTUPLE: "named tuple",
}

# Extension payloads nest (a tuple inside a tuple packs and unpacks recursively).
# _MAX_DEPTH bounds that nesting identically on both sides, so anything
# ``encode`` accepts ``decode`` can read, well inside Python's recursion limit.
# msgpack's packer recurses on the C stack for each list/dict level, up to 1024
# per pack call, and that count restarts inside every extension payload: a
# tuple of deep lists of tuples of deep lists ... would overflow the C stack
# (segfault) long before Python's recursion limit.  So below the first
# _UNCHECKED_LEVELS extension levels (at most 4 x 1024 frames, which is safe,
# and covers almost every real value without any extra walk) the list/dict
# levels of each nested payload are counted, and their sum along the current
# chain may not exceed _MAX_PLAIN.
_MAX_DEPTH = 100
_UNCHECKED_LEVELS = 3
_MAX_PLAIN = 1024
_PLAIN_CONTAINERS = (list, dict)


_INT_MIN = -(1 << 63)
_INT_END = 1 << 64  # msgpack ints cover [-2**63, 2**64)


class _ThreadState(threading.local):
    """Per-thread packers, one per nesting level (a Packer is neither reentrant nor thread safe)."""

    def __init__(self) -> None:
        self.packers: list[msgpack.Packer] = []
        self.depth = 0  # packers in use by the current encode
        self.plain = 0  # list/dict levels inside the extension payloads being packed
        self.ddepth = 0  # extension payloads being unpacked by the current decode


_state = _ThreadState()


_CLASS_REFS: dict[type, tuple[str, str]] = {}
_REGISTERED: dict[tuple[str, str], type] = {}
"""(module, qualname) -> the class decoding may construct for that tag."""


def _walk(root: object, qualname: str) -> object:
    obj = root
    for part in qualname.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def _class_ref(cls: type) -> tuple[str, str]:
    """(module, qualname) of ``cls``, checked to lead back to ``cls`` so decoding can import it."""
    ref = _CLASS_REFS.get(cls)
    if ref is not None:
        return ref
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise _Failure(_type_name(cls), "its class has no importable module and qualname")
    if "<locals>" in qualname:
        raise _Failure(
            _type_name(cls),
            "its class is defined inside a function, so decoding could not import it",
        )
    loaded = sys.modules.get(module)
    if loaded is not None and _walk(loaded, qualname) is not cls:
        raise _Failure(
            _type_name(cls),
            f"'{module}.{qualname}' does not lead back to its class, so decoding could not import it",
        )
    ref = (module, qualname)
    _CLASS_REFS[cls] = ref
    _REGISTERED[ref] = cls  # a class this process encodes is one it may decode
    return ref


_FIELDS: dict[type, dict[str, dataclasses.Field]] = {}


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        _FIELDS[cls] = fields
    return fields


def _is_codec_class(cls: object) -> bool:
    """Whether values of ``cls`` travel as one of the class-tagged extension types."""
    if not isinstance(cls, type):
        return False
    if issubclass(cls, enum.Enum) or dataclasses.is_dataclass(cls):
        return True
    if callable(getattr(cls, "model_dump", None)) and callable(getattr(cls, "model_validate", None)):
        return True
    return issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_make")


def register_type(obj: Any) -> Any:
    """Let decoding construct the class ``obj`` (an enum, dataclass, named tuple or pydantic
    model), or every such class found in the module ``obj``; returns ``obj`` (usable as a
    class decorator). Values a process encodes register their classes by themselves; a process
    that only decodes a class (a shard reading a client's payload, a client reading a result)
    registers it here. ``TypeError`` for a class the codec cannot carry."""
    if isinstance(obj, types.ModuleType):
        for value in list(vars(obj).values()):
            if _is_codec_class(value) and value.__module__ != "enum":
                try:
                    _class_ref(value)
                except _Failure:
                    pass  # not reachable by its name (a local class, an alias): skip it
        return obj
    if not _is_codec_class(obj):
        raise TypeError(f"register_type needs an enum, dataclass, named tuple or pydantic model class (or a module), not {obj!r}")
    try:
        _class_ref(obj)
    except _Failure as failure:
        raise TypeError(f"cannot register {failure.type_name}: {failure.reason}") from None
    return obj


def _resolve(module: object, qualname: object) -> Any:
    """The registered class for a type tag; never imports anything."""
    if type(module) is not str or type(qualname) is not str:
        raise ValueError("malformed class reference")
    cls = _REGISTERED.get((module, qualname))
    if cls is None:
        raise _Failure(
            f"{module}.{qualname}",
            "its class is not registered in this process (register it with weft_actors.register_type, "
            "or define it in the app module)",
        )
    return cls
