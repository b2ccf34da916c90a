"""A warning for each CURVE handshake the authenticator refuses, at most one per interval.

Without it a client with an unknown key sees only silence (ZeroMQ drops the handshake: no
error reaches it), and the operator sees nothing either: the line names the refused key, so
the two can be matched. Rate-limited, since a refused client retries many times a second.
"""

from __future__ import annotations

import logging

from .._ratelimit import RateLimitedLog
from ..bus import KeyRing

__all__ = ["LoggedKeys"]

log = logging.getLogger("weft_actors.supervisor")


class LoggedKeys:
    """The ZAP credentials check of ``keys`` (pyzmq calls ``callback``), logging refusals."""

    def __init__(self, keys: KeyRing, interval: float = 10.0) -> None:
        self.keys = keys
        self._log = RateLimitedLog(log, interval)

    def callback(self, domain: str, key: bytes) -> bool:
        admitted = self.keys.callback(domain, key)
        if not admitted:
            shown = key.decode("ascii", "replace") if isinstance(key, bytes) else str(key)
            self._log.warning(
                "zap-refused",
                "refused a CURVE handshake (ZAP): client key %s is not authorised (its public .key file is not in %s%s)",
                shown, self.keys.full_dir, f" or {self.keys.readonly_dir}" if self.keys.readonly_dir else "",
            )
        return admitted
