"""Decoding that reads the same in every process, for what is derived from a stored value
(the memo index, ``store._memo``): msgpack's own values and big ints as themselves, every other
extension value (an enum, a dataclass, a datetime, ...) as the one placeholder ``OPAQUE``.

``decode`` constructs only the classes this process registered, so one stored memo decodes in
the shard that wrote it (which imported the app) and fails in a tool that reads the store
without the app (``check``, ``purge``, an upgrade's rebuild): an index derived with ``decode``
would hold one set of entries for the writer and another for the tool, which then reports the
writer's entries as orphans, or deletes none of them. Here no class is ever resolved, so the
answer does not depend on what the process imported.
"""

from __future__ import annotations

from typing import Final

import msgpack

from ._errors import _TOO_DEEP, _decode_error, _describe
from ._wire import _EXT_BIGINT

__all__ = ["decode_plain", "OPAQUE"]


class _Opaque:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<opaque extension value>"


OPAQUE: Final = _Opaque()
"""What every extension value but a big int decodes to."""


def _hook(code: int, data: bytes) -> object:
    if code == _EXT_BIGINT:
        return int.from_bytes(data, "big", signed=True)
    return OPAQUE


def decode_plain(data: bytes, where: str = "value") -> object:
    """``data`` decoded as described above; ``SerializationError`` for what is not msgpack."""
    try:
        return msgpack.unpackb(data, ext_hook=_hook, raw=False, strict_map_key=False, use_list=True)
    except RecursionError as exc:
        raise _decode_error(None, where, _TOO_DEEP) from exc
    except Exception as exc:
        raise _decode_error(None, where, f"invalid payload ({_describe(exc)})") from exc
