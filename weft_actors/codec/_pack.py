"""Encoding: values to msgpack bytes, with everything msgpack cannot pack exactly going
through ``_default`` to the extension types of ``_wire``."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import uuid
from typing import Any, Callable
from zoneinfo import ZoneInfo

import msgpack
from msgpack import ExtType

from weft_actors.errors import SerializationError

from ._errors import (
    _MISSING,
    _TOO_DEEP,
    _describe,
    _encode_error,
    _Failure,
    _find_path,
    _type_name,
)
from ._wire import (
    _EXT_BIGINT,
    _EXT_DATACLASS,
    _EXT_DATE,
    _EXT_DATETIME,
    _EXT_DECIMAL,
    _EXT_ENUM,
    _EXT_FROZENSET,
    _EXT_NAMEDTUPLE,
    _EXT_PYDANTIC,
    _EXT_SET,
    _EXT_TIME,
    _EXT_TIMEDELTA,
    _EXT_TUPLE,
    _EXT_UUID,
    _INT_END,
    _INT_MIN,
    _MAX_DEPTH,
    _MAX_PLAIN,
    _PLAIN_CONTAINERS,
    _UNCHECKED_LEVELS,
    _class_ref,
    _fields,
    _state,
)


def _new_packer(buf_size: int) -> msgpack.Packer:
    return msgpack.Packer(
        default=_default,
        use_bin_type=True,
        strict_types=True,
        datetime=False,
        autoreset=True,
        buf_size=buf_size,
    )


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
        name: str | None = tz.tzname(None)
        if name == _dt.timezone(offset).tzname(None):
            name = None
        return [_offset_us(offset), name]
    owner_offset = owner.utcoffset()
    if owner_offset is None:
        raise _Failure(
            _type_name(type(owner)),
            f"its tzinfo of type {_type_name(type(tz))!r} gives no UTC offset",
            owner,
        )
    return [_offset_us(owner_offset), owner.tzname()]


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


def _enc_enum(obj: enum.Enum) -> ExtType:
    module, qualname = _class_ref(type(obj))
    return ExtType(_EXT_ENUM, _pack([module, qualname, obj.value]))


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
