"""Starting the web console (``--http``) inside the supervisor.

The console reads through a ``Client`` on the supervisor's own endpoint, so it shows what the
CLI shows and goes through the same checks. Under CURVE that client gets an ephemeral key
pair, admitted with full access in the front door's ``KeyRing`` and never written to disk.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import zmq

from ..bus import Client, KeyRing
from ..console import ConsoleServer, new_token, read_token_file
from ..errors import InvalidRequest
from ..store import LmdbStore
from ._curve import is_loopback_host

__all__ = ["parse_http", "check_http_bind", "client_endpoint", "start_console"]

log = logging.getLogger("weft_actors.supervisor")

_WILDCARDS = {"*": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "[::1]"}


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``PORT`` (loopback) -> ``(host, port)``; ``ValueError``
    otherwise."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--http wants HOST:PORT or PORT, not {value!r}")
    return host, int(port_text)


def check_http_bind(host: str, curve: bool, insecure: bool) -> None:
    """Refuse a console reachable from other machines without CURVE, as the client endpoint:
    its actions cancel and terminate workflows. With ``--insecure-bind``, a warning."""
    if is_loopback_host(host):
        return
    if not curve and not insecure:
        raise InvalidRequest(
            f"refusing to serve the console on {host} without CURVE: use a loopback host, "
            f"enable CURVE, or pass --insecure-bind"
        )
    log.warning("console on %s, reachable from other machines over plain HTTP: put TLS in front of it", host)


def client_endpoint(bind: str) -> str:
    """Where a client in this process reaches the front door bound at ``bind``: a wildcard
    host becomes loopback."""
    transport, sep, address = bind.partition("://")
    if transport != "tcp":
        return bind
    host, _, port = address.rpartition(":")
    return f"{transport}{sep}{_WILDCARDS.get(host, host)}:{port}"


def start_console(
    http: str,
    *,
    bind: str,
    store: LmdbStore,
    stats: Callable[[], dict[str, Any]],
    metrics: Callable[[], str],
    token_file: str | None,
    curve_public_key: bytes | None,
    keys: KeyRing | None,
) -> tuple[ConsoleServer, Client]:
    """Bind and start the console on ``http``; log its URL and (unless read from
    ``token_file``) its action token."""
    host, port = parse_http(http)
    token = read_token_file(token_file) if token_file else new_token()
    curve: dict[str, Any] = {}
    if curve_public_key is not None and keys is not None:
        public, secret = zmq.curve_keypair()
        keys.admit(public)
        curve = {"curve_server_key": curve_public_key, "curve_public_key": public, "curve_secret_key": secret}
    client = Client(client_endpoint(bind), timeout=10.0, **curve)
    try:
        server = ConsoleServer(host, port, client=client, store=store, token=token, stats=stats, metrics=metrics)
    except OSError:
        client.close()
        raise
    server.start()
    if token_file:
        log.info("web console on %s (action token from %s)", server.url, token_file)
    else:
        log.info("web console on %s (action token: %s)", server.url, token)
    return server, client
