"""The hint bus: PUB/SUB through an XSUB/XPUB proxy in the supervisor.

A hint only says "look at the store now". Hints may be lost, duplicated or reordered;
owner-side polling of the store is what guarantees delivery.
"""

from __future__ import annotations

import logging
import threading

import msgpack
import zmq

__all__ = ["HintProxy", "encode_hint", "decode_hint", "publisher", "subscriber", "HINT_KINDS"]

log = logging.getLogger("weft_actors.bus")

HINT_KINDS = ("workflow-touched", "workflow-done", "engine-dead")
_HWM = 200_000


def encode_hint(kind: str, subject: str) -> bytes:
    return msgpack.packb((kind, subject), use_bin_type=True)


def decode_hint(frame: bytes) -> tuple[str, str] | None:
    try:
        kind, subject = msgpack.unpackb(frame, raw=False)
    except Exception:
        return None
    if not isinstance(kind, str) or not isinstance(subject, str):
        return None
    return kind, subject


class HintProxy:
    """XSUB (publishers connect here) -> XPUB (subscribers connect here), in its own thread.

    A plain poll loop rather than ``zmq.proxy``: it stops on a flag, so the sockets are always
    closed by their own thread before the context goes.
    """

    def __init__(self, context: zmq.Context) -> None:
        self._context = context
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
        self.publish_endpoint = f"tcp://127.0.0.1:{xsub.bind_to_random_port('tcp://127.0.0.1')}"
        self.subscribe_endpoint = f"tcp://127.0.0.1:{xpub.bind_to_random_port('tcp://127.0.0.1')}"
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
        for _ in range(10_000):
            try:
                frames = source.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                sink.send_multipart(frames, zmq.NOBLOCK)
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


def subscriber(context: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, _HWM)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    return sock
