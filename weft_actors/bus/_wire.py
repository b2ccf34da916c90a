"""Batches on the wire between clients and the front door, both ways.

A zmq message costs its sender a wake-up of zmq's I/O thread and a socket write, and its
receiver a read and a wake-up, whatever it carries. So a client sends the requests it has
ready at once as one message, and the front door sends the replies one client gets in one of
its turns as one message:

- a request batch is the msgpack array ``["b", request, request, ...]``, each request one
  envelope (``_protocol.encode_envelope``) as bytes: the front door opens each envelope
  (id, op, wid: never the body) and hands the same bytes on to the shard untouched;
- a reply batch is a msgpack array of reply maps, made by putting an array header before the
  replies' bytes as the shards encoded them (nothing is encoded again).

A client that sends envelopes speaks batches, and only such a client is sent reply batches
(a lone reply still goes alone); a client sending request maps, or a REQ socket, gets one
message per reply as ever. Replies to a batch come back in any order, each under its id.
"""

from __future__ import annotations

import struct
from typing import Any, Final, Iterator

import msgpack

from ..errors import InvalidRequest, PayloadTooLarge
from ._protocol import shown

__all__ = ["BATCH", "BATCH_BYTES", "decode_replies", "encode_batch", "grouped", "open_item", "open_message", "reply_batch"]

BATCH: Final = "b"
"""The first item of a request batch (an envelope's first item is the protocol version)."""
BATCH_BYTES: Final = 32 << 10
"""What a client puts in one batch at most (a request this large or larger goes alone): far
below the smallest frame limit a server has (its payload limit plus 64 KiB), so a batch of
requests that each fit always fits."""


def encode_batch(frames: list[bytes]) -> bytes:
    """One message carrying the request ``frames`` (envelopes)."""
    return msgpack.packb([BATCH, *frames], use_bin_type=True)


def grouped(frames: list[bytes]) -> Iterator[tuple[bytes, int]]:
    """``frames`` as messages of at most ``BATCH_BYTES`` each (a lone frame goes as itself),
    each with how many frames it carries, in order."""
    start = 0
    size = 0
    for index, frame in enumerate(frames):
        if index > start and size + len(frame) > BATCH_BYTES:
            yield _message(frames[start:index]), index - start
            start, size = index, 0
        size += len(frame)
    if start < len(frames):
        yield _message(frames[start:]), len(frames) - start


def _message(frames: list[bytes]) -> bytes:
    return frames[0] if len(frames) == 1 else encode_batch(frames)


def reply_batch(replies: list[bytes]) -> bytes:
    """One message carrying ``replies`` (each a msgpack map already encoded): an array header
    before them, so nothing is encoded twice."""
    count = len(replies)
    if count < 16:
        header = bytes((0x90 | count,))
    elif count < 1 << 16:
        header = struct.pack(">BH", 0xDC, count)
    else:
        header = struct.pack(">BI", 0xDD, count)
    return header + b"".join(replies)


def decode_replies(frame: bytes) -> list[dict[str, Any]]:
    """The replies a message carries: one map, or a batch of them."""
    replies = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    if type(replies) is dict:
        return [replies]
    if type(replies) is not list or not all(type(reply) is dict for reply in replies):
        raise InvalidRequest("malformed reply")
    return replies


def open_message(frame: bytes, max_frame: int) -> list[Any]:
    """A client message in the envelope form, unpacked one level: a lone envelope
    ``[v, id, op, wid, body]`` or a batch ``["b", request, ...]`` (its requests still bytes).
    ``PayloadTooLarge``/``InvalidRequest`` for a message over the limit or not msgpack."""
    if len(frame) > max_frame:
        raise PayloadTooLarge(f"message of {len(frame)} bytes exceeds the limit of {max_frame}", size=len(frame), limit=max_frame)
    try:
        items = msgpack.unpackb(frame, raw=False, max_bin_len=max_frame, max_str_len=max_frame)
    except Exception as exc:
        raise InvalidRequest(f"malformed request frame: {type(exc).__name__}") from None
    if type(items) is not list or not items:
        raise InvalidRequest("a request envelope is [v, id, op, wid, body]")
    if type(items[0]) is str and items[0] != BATCH:
        raise InvalidRequest(f"a batch begins with {BATCH!r}, not {shown(items[0])}")
    return items


def open_item(item: Any) -> Any:
    """One request of a batch, its envelope unpacked (checked by ``check_envelope``)."""
    if type(item) is not bytes:
        raise InvalidRequest("a batch carries each request as bytes")
    try:
        return msgpack.unpackb(item, raw=False)
    except Exception as exc:
        raise InvalidRequest(f"malformed request in a batch: {type(exc).__name__}") from None
