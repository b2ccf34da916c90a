"""The payload codec: msgpack with exact round trips and errors that say what and where.

Workflow arguments, results, signals and activity payloads are persisted and
replayed, so a value must come back as the *same* value of the *same* type (a
tuple stays a tuple, an aware datetime keeps its zone, a 100-bit int stays
exact); and a value that cannot be stored must fail when it is written, with an
error naming the offending type and where it came from (the caller's label plus
the path inside the value), not as a bare ``TypeError`` from deep inside msgpack
or as a surprise during replay.

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

Deliberate approximations: subclasses of dict, list, str, bytes, int, float,
set, tuple, datetime, Decimal and UUID that are not enums, dataclasses, pydantic
models or named tuples are written as their base type (an ``OrderedDict`` or
``defaultdict`` decodes as a plain ``dict``); ``bytearray`` and ``memoryview``
are packed by msgpack before the codec sees them and decode as ``bytes``; a
``tzinfo`` that is neither a ``ZoneInfo`` with a key nor a ``datetime.timezone``
is written as the fixed offset (and name) it has at that instant.  Classes are
re-imported by module and qualname when decoding, so only decode trusted data.

Threading: ``encode``/``decode`` keep their msgpack packers per thread (activities
may run in a thread pool).  ``pack_record`` shares one module-level packer and
must only be called from the engine's event-loop thread.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import importlib
import sys
import threading
import uuid
from typing import Any, Callable
from zoneinfo import ZoneInfo

import msgpack
from msgpack import ExtType

from weft_actors.errors import SerializationError

__all__ = [
    "encode",
    "decode",
    "pack_record",
    "unpack_record",
    "encode_args",
    "decode_args",
]

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
_TOO_DEEP = "nested too deeply"

_INT_MIN = -(1 << 63)
_INT_END = 1 << 64  # msgpack ints cover [-2**63, 2**64)

_MISSING: Any = object()


# --------------------------------------------------------------------------- errors


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


# --------------------------------------------------------------------------- packing


def _new_packer(buf_size: int) -> msgpack.Packer:
    return msgpack.Packer(
        default=_default,
        use_bin_type=True,
        strict_types=True,
        datetime=False,
        autoreset=True,
        buf_size=buf_size,
    )


class _ThreadState(threading.local):
    """Per-thread packers, one per nesting level (a Packer is neither reentrant nor thread safe)."""

    def __init__(self) -> None:
        self.packers: list[msgpack.Packer] = []
        self.depth = 0  # packers in use by the current encode
        self.plain = 0  # list/dict levels inside the extension payloads being packed
        self.ddepth = 0  # extension payloads being unpacked by the current decode


_state = _ThreadState()


def _plain_depth(root: list | dict, limit: int) -> int:
    """How deeply lists/dicts nest in ``root`` (counting ``root``), stopping once past ``limit``."""
    depth = 1
    level: list[Any] = [root]
    while True:
        found = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, _PLAIN_CONTAINERS):
                    found.append(child)
        if not found or depth > limit:
            return depth
        depth += 1
        if len(found) > 1:  # a shared or cyclic node is walked once per level
            found = list({id(node): node for node in found}.values())
        level = found


def _pack(obj: object) -> bytes:
    state = _state
    depth = state.depth
    packers = state.packers
    if depth == len(packers):
        if depth > _MAX_DEPTH:
            raise _Failure(None, _TOO_DEEP)
        packers.append(_new_packer(256 * 1024 if depth == 0 else 4096))
    used = state.plain
    if depth > _UNCHECKED_LEVELS and isinstance(obj, _PLAIN_CONTAINERS):
        cost = _plain_depth(obj, _MAX_PLAIN - used)
        if cost > _MAX_PLAIN - used:
            raise _Failure(None, _TOO_DEEP)
        state.plain = used + cost
    state.depth = depth + 1
    try:
        return packers[depth].pack(obj)
    finally:
        state.depth = depth
        state.plain = used


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _enc_int(value: int) -> object:
    if _INT_MIN <= value < _INT_END:
        return value
    return ExtType(_EXT_BIGINT, value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True))


def _enc_tuple(obj: tuple) -> ExtType:
    return ExtType(_EXT_TUPLE, _pack(list(obj)))


def _sorted_elements(obj: set | frozenset) -> bytes:
    return _array_header(len(obj)) + b"".join(sorted([_pack(item) for item in obj]))


def _enc_set(obj: set) -> ExtType:
    return ExtType(_EXT_SET, _sorted_elements(obj))


def _enc_frozenset(obj: frozenset) -> ExtType:
    return ExtType(_EXT_FROZENSET, _sorted_elements(obj))


def _offset_us(offset: _dt.timedelta) -> int:
    return (offset.days * 86400 + offset.seconds) * 1_000_000 + offset.microseconds


def _tz_wire(tz: _dt.tzinfo | None, owner: _dt.datetime | _dt.time) -> object:
    if tz is None:
        return None
    if isinstance(tz, ZoneInfo) and tz.key is not None:
        return tz.key
    if type(tz) is _dt.timezone:
        offset = tz.utcoffset(None)
        name = tz.tzname(None)
        if name == _dt.timezone(offset).tzname(None):
            name = None
        return [_offset_us(offset), name]
    offset = owner.utcoffset()
    if offset is None:
        raise _Failure(
            _type_name(type(owner)),
            f"its tzinfo of type {_type_name(type(tz))!r} gives no UTC offset",
            owner,
        )
    return [_offset_us(offset), owner.tzname()]


def _enc_datetime(obj: _dt.datetime) -> ExtType:
    return ExtType(
        _EXT_DATETIME,
        _pack(
            [
                obj.year,
                obj.month,
                obj.day,
                obj.hour,
                obj.minute,
                obj.second,
                obj.microsecond,
                obj.fold,
                _tz_wire(obj.tzinfo, obj),
            ]
        ),
    )


def _enc_date(obj: _dt.date) -> ExtType:
    return ExtType(_EXT_DATE, obj.toordinal().to_bytes(4, "big"))


def _enc_time(obj: _dt.time) -> ExtType:
    return ExtType(
        _EXT_TIME,
        _pack(
            [obj.hour, obj.minute, obj.second, obj.microsecond, obj.fold, _tz_wire(obj.tzinfo, obj)]
        ),
    )


def _enc_timedelta(obj: _dt.timedelta) -> ExtType:
    return ExtType(_EXT_TIMEDELTA, _pack([obj.days, obj.seconds, obj.microseconds]))


def _enc_decimal(obj: decimal.Decimal) -> ExtType:
    return ExtType(_EXT_DECIMAL, str(obj).encode("ascii"))


def _enc_uuid(obj: uuid.UUID) -> ExtType:
    return ExtType(_EXT_UUID, obj.bytes)


# Encoders looked up by exact type.  Types learned on the slow path (enum,
# dataclass, pydantic and named-tuple classes that can be re-imported) are
# added so later values of the same class skip the checks.
_ENCODERS: dict[type, Callable[[Any], object]] = {
    int: _enc_int,  # reaches ``default`` only when out of msgpack's range
    tuple: _enc_tuple,
    set: _enc_set,
    frozenset: _enc_frozenset,
    _dt.datetime: _enc_datetime,
    _dt.date: _enc_date,
    _dt.time: _enc_time,
    _dt.timedelta: _enc_timedelta,
    decimal.Decimal: _enc_decimal,
    uuid.UUID: _enc_uuid,
}

_CLASS_REFS: dict[type, tuple[str, str]] = {}


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
    return ref


def _enc_enum(obj: enum.Enum) -> ExtType:
    module, qualname = _class_ref(type(obj))
    return ExtType(_EXT_ENUM, _pack([module, qualname, obj.value]))


_FIELDS: dict[type, dict[str, dataclasses.Field]] = {}


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        _FIELDS[cls] = fields
    return fields


def _enc_dataclass(obj: object) -> ExtType:
    cls = type(obj)
    module, qualname = _class_ref(cls)
    values = {}
    for name in _fields(cls):
        value = getattr(obj, name, _MISSING)
        if value is not _MISSING:  # an init=False field that was never set stays unset
            values[name] = value
    return ExtType(_EXT_DATACLASS, _pack([module, qualname, values]))


def _enc_pydantic(obj: Any) -> ExtType:
    module, qualname = _class_ref(type(obj))
    return ExtType(_EXT_PYDANTIC, _pack([module, qualname, obj.model_dump(mode="python")]))


def _enc_namedtuple(obj: tuple) -> ExtType:
    module, qualname = _class_ref(type(obj))
    return ExtType(_EXT_NAMEDTUPLE, _pack([module, qualname, list(obj)]))


# Subclasses of supported types that are none of the above are written as the
# base type (checked in order: datetime before date).
_DOWNGRADES: tuple[tuple[type, Callable[[Any], object]], ...] = (
    (int, lambda o: _enc_int(int.__index__(o))),
    (float, float.__float__),
    (str, str.__str__),
    (bytes, lambda o: o[:]),
    (bytearray, bytes),
    (dict, dict.copy),
    (list, list.copy),
    (tuple, _enc_tuple),
    (set, _enc_set),
    (frozenset, _enc_frozenset),
    (_dt.datetime, _enc_datetime),
    (_dt.date, _enc_date),
    (_dt.time, _enc_time),
    (_dt.timedelta, _enc_timedelta),
    (decimal.Decimal, _enc_decimal),
    (uuid.UUID, _enc_uuid),
)


def _encode_other(obj: object) -> object:
    cls = type(obj)
    encoder: Callable[[Any], object] | None = None
    if issubclass(cls, enum.Enum):
        encoder = _enc_enum
    elif dataclasses.is_dataclass(cls):
        encoder = _enc_dataclass
    elif callable(getattr(cls, "model_dump", None)) and callable(
        getattr(cls, "model_validate", None)
    ):
        encoder = _enc_pydantic
    elif issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_make"):
        encoder = _enc_namedtuple
    if encoder is not None:
        result = encoder(obj)  # raises unless the class can be re-imported
        _ENCODERS[cls] = encoder
        return result
    for base, downgrade in _DOWNGRADES:
        if isinstance(obj, base):
            return downgrade(obj)
    raise _Failure(_type_name(cls), "unsupported type", obj)


def _default(obj: object) -> object:
    """msgpack ``default``: every value msgpack cannot pack exactly by itself comes here."""
    encoder = _ENCODERS.get(type(obj))
    try:
        if encoder is not None:
            return encoder(obj)
        return _encode_other(obj)
    except _Failure as failure:
        if failure.type_name is None:
            failure.type_name = _type_name(type(obj))
        if failure.target is _MISSING:
            failure.target = obj
        raise
    except RecursionError:
        raise
    except Exception as exc:
        raise _Failure(_type_name(type(obj)), _describe(exc), obj) from exc


def encode(value: object, where: str = "value") -> bytes:
    """msgpack bytes for ``value``; ``where`` labels it in errors (e.g. "workflow argument").

    Raises ``SerializationError`` (with ``type_name``, ``where`` and ``path``) and
    nothing else when any part of ``value`` cannot be encoded.
    """
    try:
        return _pack(value)
    except _Failure as failure:
        path = None if failure.target is _MISSING else _find_path(value, failure.target)
        error = _encode_error(
            failure.type_name or _type_name(type(value)), where, failure.reason, path
        )
        cause = failure.__cause__
    except RecursionError as exc:
        error = _encode_error(_type_name(type(value)), where, _TOO_DEEP, None)
        cause = exc
    except Exception as exc:  # msgpack's own TypeError / ValueError / OverflowError
        error = _encode_error(_type_name(type(value)), where, _describe(exc), None)
        cause = exc
    raise error from cause


# --------------------------------------------------------------------------- unpacking

_unpackb = msgpack.unpackb


def _unpack_nested(data: bytes) -> Any:
    state = _state
    depth = state.ddepth
    if depth >= _MAX_DEPTH:
        raise _Failure(None, _TOO_DEEP)
    state.ddepth = depth + 1
    try:
        return _unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False, use_list=True)
    finally:
        state.ddepth = depth


def _unpack_list(data: bytes, length: int | None = None) -> list:
    items = _unpack_nested(data)
    if type(items) is not list or (length is not None and len(items) != length):
        raise ValueError("malformed extension payload")
    return items


_RESOLVED: dict[tuple[str, str], type] = {}


def _resolve(module: object, qualname: object) -> Any:
    if type(module) is not str or type(qualname) is not str:
        raise ValueError("malformed class reference")
    cached = _RESOLVED.get((module, qualname))
    if cached is not None:
        return cached
    name = f"{module}.{qualname}"
    try:
        loaded = importlib.import_module(module)
    except Exception as exc:
        raise _Failure(name, f"its class cannot be imported ({_describe(exc)})") from exc
    cls = _walk(loaded, qualname)
    if cls is _MISSING:
        raise _Failure(name, f"its class cannot be imported (module {module!r} has no {qualname!r})")
    if not isinstance(cls, type):
        raise _Failure(name, f"{name!r} is not a class")
    _RESOLVED[(module, qualname)] = cls
    return cls


def _dec_bigint(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


def _dec_tuple(data: bytes) -> tuple:
    return tuple(_unpack_list(data))


def _dec_set(data: bytes) -> set:
    return set(_unpack_list(data))


def _dec_frozenset(data: bytes) -> frozenset:
    return frozenset(_unpack_list(data))


def _tz_from_wire(wire: object) -> _dt.tzinfo | None:
    if wire is None:
        return None
    if type(wire) is str:
        try:
            return ZoneInfo(wire)
        except Exception as exc:
            raise _Failure("zoneinfo.ZoneInfo", f"unknown time zone {wire!r} ({_describe(exc)})") from exc
    if type(wire) is list and len(wire) == 2 and type(wire[0]) is int:
        offset = _dt.timedelta(microseconds=wire[0])
        return _dt.timezone(offset) if wire[1] is None else _dt.timezone(offset, wire[1])
    raise ValueError("malformed tzinfo")


def _dec_datetime(data: bytes) -> _dt.datetime:
    y, mo, d, h, mi, s, us, fold, tz = _unpack_list(data, 9)
    return _dt.datetime(y, mo, d, h, mi, s, us, _tz_from_wire(tz), fold=fold)


def _dec_date(data: bytes) -> _dt.date:
    if len(data) != 4:
        raise ValueError("malformed date")
    return _dt.date.fromordinal(int.from_bytes(data, "big"))


def _dec_time(data: bytes) -> _dt.time:
    h, mi, s, us, fold, tz = _unpack_list(data, 6)
    return _dt.time(h, mi, s, us, _tz_from_wire(tz), fold=fold)


def _dec_timedelta(data: bytes) -> _dt.timedelta:
    days, seconds, us = _unpack_list(data, 3)
    return _dt.timedelta(days=days, seconds=seconds, microseconds=us)


def _dec_decimal(data: bytes) -> decimal.Decimal:
    return decimal.Decimal(data.decode("ascii"))


def _dec_uuid(data: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=data)


def _dec_enum(data: bytes) -> enum.Enum:
    module, qualname, value = _unpack_list(data, 3)
    cls = _resolve(module, qualname)
    if not issubclass(cls, enum.Enum):
        raise _Failure(_type_name(cls), "it is not an Enum class")
    try:
        return cls(value)
    except ValueError as exc:
        raise _Failure(_type_name(cls), f"it has no member with value {_short(value)}") from exc


def _dec_dataclass(data: bytes) -> object:
    module, qualname, values = _unpack_list(data, 3)
    cls = _resolve(module, qualname)
    if not dataclasses.is_dataclass(cls):
        raise _Failure(_type_name(cls), "it is not a dataclass")
    if type(values) is not dict:
        raise ValueError("malformed dataclass fields")
    obj = cls.__new__(cls)
    fields = _fields(cls)
    for name, value in values.items():
        if name not in fields:
            raise _Failure(_type_name(cls), f"it has no field {_short(name)}")
        object.__setattr__(obj, name, value)
    if len(values) != len(fields):  # fields added since the value was written get their defaults
        for name, f in fields.items():
            if name in values:
                continue
            if f.default is not dataclasses.MISSING:
                object.__setattr__(obj, name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                object.__setattr__(obj, name, f.default_factory())
    return obj


def _dec_pydantic(data: bytes) -> object:
    module, qualname, dumped = _unpack_list(data, 3)
    cls = _resolve(module, qualname)
    validate = getattr(cls, "model_validate", None)
    if not callable(validate):
        raise _Failure(_type_name(cls), "it is not a pydantic model")
    try:
        return validate(dumped)
    except Exception as exc:
        raise _Failure(_type_name(cls), f"validation failed ({_describe(exc)})") from exc


def _dec_namedtuple(data: bytes) -> tuple:
    module, qualname, items = _unpack_list(data, 3)
    cls = _resolve(module, qualname)
    if not (issubclass(cls, tuple) and hasattr(cls, "_make")):
        raise _Failure(_type_name(cls), "it is not a named tuple class")
    if type(items) is not list:
        raise ValueError("malformed named tuple")
    return cls._make(items)


_DECODERS: dict[int, Callable[[bytes], object]] = {
    _EXT_BIGINT: _dec_bigint,
    _EXT_TUPLE: _dec_tuple,
    _EXT_SET: _dec_set,
    _EXT_FROZENSET: _dec_frozenset,
    _EXT_DATETIME: _dec_datetime,
    _EXT_DATE: _dec_date,
    _EXT_TIME: _dec_time,
    _EXT_TIMEDELTA: _dec_timedelta,
    _EXT_DECIMAL: _dec_decimal,
    _EXT_UUID: _dec_uuid,
    _EXT_ENUM: _dec_enum,
    _EXT_DATACLASS: _dec_dataclass,
    _EXT_PYDANTIC: _dec_pydantic,
    _EXT_NAMEDTUPLE: _dec_namedtuple,
}


def _ext_hook(code: int, data: bytes) -> object:
    decoder = _DECODERS.get(code)
    if decoder is None:
        raise _Failure(None, f"unknown extension type code {code}")
    try:
        return decoder(data)
    except (_Failure, RecursionError):
        raise
    except Exception as exc:
        raise _Failure(_EXT_NAMES[code], f"corrupt payload ({_describe(exc)})") from exc


def decode(data: bytes, where: str = "value") -> object:
    """The value ``encode`` wrote; any corrupt or unreadable input raises ``SerializationError``."""
    try:
        return _unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False, use_list=True)
    except _Failure as failure:
        error = _decode_error(failure.type_name, where, failure.reason)
        cause = failure.__cause__
    except RecursionError as exc:
        error = _decode_error(None, where, _TOO_DEEP)
        cause = exc
    except Exception as exc:
        error = _decode_error(None, where, f"invalid payload ({_describe(exc)})")
        cause = exc
    raise error from cause


# --------------------------------------------------------------------------- arguments


def encode_args(args: tuple, where: str = "workflow argument") -> bytes:
    """A positional-arguments tuple as a msgpack array, each element through the full codec."""
    if not isinstance(args, (tuple, list)):
        raise SerializationError(
            f"cannot encode arguments of type {_type_name(type(args))!r} ({where}): "
            "expected a tuple",
            type_name=_type_name(type(args)),
            where=where,
            path=None,
        )
    return encode(list(args), where)


def decode_args(data: bytes, where: str = "workflow argument") -> tuple:
    """The tuple ``encode_args`` wrote."""
    value = decode(data, where)
    if type(value) is not list:
        raise _decode_error(_type_name(type(value)), where, "expected an argument array")
    return tuple(value)


# --------------------------------------------------------------------------- records

# Engine-internal records (plain dicts/lists/str/int/float/bytes/bool/None) take
# this path: no ``default``, no ext types.  The packer is shared and NOT thread
# safe -- it is only used from the engine's event-loop thread.
_RECORD_PACKER = msgpack.Packer(use_bin_type=True, autoreset=True)

#: ``pack_record(obj) -> bytes``: msgpack bytes for a plain engine record.  The
#: packer's bound method itself, with no Python frame around it (hot path);
#: unsupported values raise msgpack's ``TypeError`` -- records are plain by
#: construction, so that is an engine bug, not bad input.
pack_record: Callable[[Any], bytes] = _RECORD_PACKER.pack


def unpack_record(data: bytes) -> Any:
    """The plain record ``pack_record`` wrote."""
    return _unpackb(data, raw=False, use_list=True, strict_map_key=False)
