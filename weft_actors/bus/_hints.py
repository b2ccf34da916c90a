"""The hint bus: PUB/SUB through an XSUB/XPUB proxy in the supervisor.

A hint only says "look at the store now". Hints may be lost, duplicated or reordered;
owner-side polling of the store is what guarantees delivery.

A hint is one frame, ``kind letter || workflow id || NUL``, so zmq's prefix subscriptions
filter them where they are published: every shard takes every "touched" and "engine-dead"
hint (it may own the workflow), but a "done" hint only reaches a shard that subscribed to
that workflow's (``hint_topic("workflow-done", wid)``), because a caller there waits for it.
Unsubscribed hints are dropped by the publishing socket itself: most cost nothing.
"""

from __future__ import annotations

import logging
import threading

import zmq

from ._frames import bind_internal, drain, send_frames

__all__ = ["HintProxy", "encode_hint", "decode_hint", "hint_topic", "publisher", "subscriber", "HINT_KINDS"]

log = logging.getLogger("weft_actors.bus")

HINT_KINDS = ("workflow-touched", "workflow-done", "engine-dead")
_HWM = 200_000
_LETTER = {"workflow-touched": b"T", "workflow-done": b"D", "engine-dead": b"X"}
_KIND = {letter[0]: kind for kind, letter in _LETTER.items()}


def hint_topic(kind: str, subject: str | None = None) -> bytes:
    """The subscription prefix for every hint of ``kind``, or for ``subject``'s only."""
    letter = _LETTER[kind]
    return letter if subject is None else letter + subject.encode() + b"\0"


def encode_hint(kind: str, subject: str) -> bytes:
    return _LETTER[kind] + subject.encode() + b"\0"


def decode_hint(frame: bytes) -> tuple[str, str] | None:
    """``(kind, subject)``, or None for a frame that is not a hint."""
    if len(frame) < 2 or frame[-1] != 0:
        return None
    kind = _KIND.get(frame[0])
    if kind is None:
        return None
    try:
        subject = frame[1:-1].decode()
    except UnicodeDecodeError:
        return None
    return kind, subject


DEFAULT_TOPICS = (hint_topic("workflow-touched"), hint_topic("engine-dead"))


class HintProxy:
    """XSUB (publishers connect here) -> XPUB (subscribers connect here), in its own thread.

    A plain poll loop rather than ``zmq.proxy``: it stops on a flag, so the sockets are always
    closed by their own thread before the context goes.
    """

    def __init__(self, context: zmq.Context, endpoints: tuple[str, str] | None = None) -> None:
        """``endpoints``: (publish, subscribe) addresses to bind, ``ipc://`` ones cheapest; by
        default two free loopback TCP ports."""
        self._context = context
        self._endpoints = endpoints
        self.publish_endpoint = ""
        self.subscribe_endpoint = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weft-hints", daemon=True)
        self._ready = threading.Event()
        self.forwarded = 0

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        xsub = self._context.socket(zmq.XSUB)
        xpub = self._context.socket(zmq.XPUB)
        for sock in (xsub, xpub):
            sock.setsockopt(zmq.SNDHWM, _HWM)
            sock.setsockopt(zmq.RCVHWM, _HWM)
            sock.setsockopt(zmq.LINGER, 0)
        wanted = self._endpoints or (None, None)
        self.publish_endpoint = bind_internal(xsub, wanted[0])
        self.subscribe_endpoint = bind_internal(xpub, wanted[1])
        self._ready.set()
        poller = zmq.Poller()
        poller.register(xsub, zmq.POLLIN)
        poller.register(xpub, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                events = dict(poller.poll(100))
                if xsub in events:
                    self._pump(xsub, xpub)
                if xpub in events:
                    self._pump(xpub, xsub)  # subscriptions travel upstream
        finally:
            xsub.close(0)
            xpub.close(0)

    def _pump(self, source: zmq.Socket, sink: zmq.Socket) -> None:
        for frames in drain(source):
            try:
                send_frames(sink, frames)
                self.forwarded += 1
            except zmq.Again:
                pass  # a full subscriber drops hints; polling covers them

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def publisher(context: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = context.socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, _HWM)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def subscriber(context: zmq.Context, endpoint: str, topics: tuple[bytes, ...] = DEFAULT_TOPICS) -> zmq.Socket:
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, _HWM)
    sock.setsockopt(zmq.LINGER, 0)
    for topic in topics:
        sock.setsockopt(zmq.SUBSCRIBE, topic)
    sock.connect(endpoint)
    return sock
