"""Decoding: msgpack bytes back to the values ``_pack`` wrote, extension types through
``_ext_hook``."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import uuid
from typing import Any, Callable
from zoneinfo import ZoneInfo

import msgpack

from ..errors import SerializationError
from ._errors import _TOO_DEEP, _decode_error, _describe, _Failure, _short, _type_name
from ._wire import (
    _EXT_BIGINT,
    _EXT_DATACLASS,
    _EXT_DATE,
    _EXT_DATETIME,
    _EXT_DECIMAL,
    _EXT_ENUM,
    _EXT_FROZENSET,
    _EXT_NAMEDTUPLE,
    _EXT_NAMES,
    _EXT_PYDANTIC,
    _EXT_SET,
    _EXT_TIME,
    _EXT_TIMEDELTA,
    _EXT_TUPLE,
    _EXT_UUID,
    _MAX_DEPTH,
    _fields,
    _resolve,
    _state,
)

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
    cls: type = _resolve(module, qualname)
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


def decode_args(data: bytes, where: str = "workflow argument") -> tuple:
    """The tuple ``encode_args`` wrote."""
    value = decode(data, where)
    if type(value) is not list:
        raise _decode_error(_type_name(type(value)), where, "expected an argument array")
    return tuple(value)


def count_args(data: bytes, where: str = "workflow argument") -> int:
    """How many arguments ``encode_args`` wrote, read from the array's header alone (nothing
    is decoded, so it costs the same whatever the arguments are)."""
    head = data[:1]
    if head and 0x90 <= head[0] <= 0x9F:
        return head[0] & 0x0F
    if head == b"\xdc" and len(data) >= 3:
        return int.from_bytes(data[1:3], "big")
    if head == b"\xdd" and len(data) >= 5:
        return int.from_bytes(data[1:5], "big")
    raise _decode_error(None, where, "expected an argument array")


def try_decode_args(data: bytes, where: str = "workflow argument") -> tuple[list[Any] | None, str | None]:
    """``(arguments, None)``, or ``(None, why)`` when they cannot be decoded in this process
    (a type it has not registered, a corrupt payload): for views that show them beside other
    things, which a value they cannot read must not cost."""
    try:
        return list(decode_args(data, where)), None
    except SerializationError as exc:
        return None, f"{exc.code}: {exc}"


def try_decode(data: bytes, where: str = "value") -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, why)`` when ``data`` cannot be decoded in this process:
    for views (``describe``'s payloads) that a value they cannot read must not cost."""
    try:
        return decode(data, where), None
    except SerializationError as exc:
        return None, f"{exc.code}: {exc}"
