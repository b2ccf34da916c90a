"""Engine-internal records: plain msgpack on the hot path, without the payload codec's hooks."""

from __future__ import annotations

from typing import Any, Callable

import msgpack

_unpackb = msgpack.unpackb


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
