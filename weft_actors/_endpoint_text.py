"""The one check of an endpoint as typed on a command line, shared by the client's
``--endpoint`` and the supervisor's ``--bind``: a bare ``host:port`` names no transport, and
ZeroMQ would otherwise read it as something else (or the supervisor as a non-loopback
address to refuse), so both say the same thing: write ``tcp://host:port``."""

from __future__ import annotations

__all__ = ["TYPED_TRANSPORTS", "endpoint_problem"]

TYPED_TRANSPORTS = ("tcp://", "ipc://", "inproc://")


def endpoint_problem(endpoint: str) -> str | None:
    """What is wrong with one typed ``endpoint``, with the fix; None if nothing."""
    if not endpoint.startswith(TYPED_TRANSPORTS):
        return f"{endpoint!r} names no transport: write tcp://{endpoint.split('://')[-1]} (a ZeroMQ endpoint)"
    if endpoint.startswith("tcp://") and "," in endpoint:
        return f"{endpoint!r}: name each of several endpoints with its transport, e.g. tcp://a:5555,tcp://b:5555"
    return None
