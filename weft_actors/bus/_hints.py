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
    """XSUB (publishers connect here) -> XPUB (subscribers connect here), in its own thread."""

    def __init__(self, context: zmq.Context) -> None:
        self._context = context
        self.publish_endpoint = ""
        self.subscribe_endpoint = ""
        self._control_endpoint = f"inproc://weft-hints-{id(self)}"
        self._thread = threading.Thread(target=self._run, name="weft-hints", daemon=True)
        self._ready = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        xsub = self._context.socket(zmq.XSUB)
        xpub = self._context.socket(zmq.XPUB)
        control = self._context.socket(zmq.PAIR)
        for sock in (xsub, xpub):
            sock.setsockopt(zmq.SNDHWM, _HWM)
            sock.setsockopt(zmq.RCVHWM, _HWM)
            sock.setsockopt(zmq.LINGER, 0)
        self.publish_endpoint = f"tcp://127.0.0.1:{xsub.bind_to_random_port('tcp://127.0.0.1')}"
        self.subscribe_endpoint = f"tcp://127.0.0.1:{xpub.bind_to_random_port('tcp://127.0.0.1')}"
        control.bind(self._control_endpoint)
        self._ready.set()
        try:
            zmq.proxy_steerable(xsub, xpub, None, control)
        except zmq.ContextTerminated:
            pass
        finally:
            for sock in (xsub, xpub, control):
                sock.close(0)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        control = self._context.socket(zmq.PAIR)
        control.connect(self._control_endpoint)
        control.send(b"TERMINATE")
        control.close(linger=1000)
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
