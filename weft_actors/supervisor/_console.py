"""Starting the web console (``--http``) inside the supervisor.

The console reads through a ``Client`` on the supervisor's own endpoint, so it shows what the
CLI shows and goes through the same checks. Under CURVE that client gets an ephemeral key
pair, admitted with full access in the front door's ``KeyRing`` and never written to disk;
the console's own credentials (``console._access``) then say who may read and act through it.

``weft_actors.console`` (and h11 with it) is imported only when a console starts: a
supervisor without ``--http`` needs neither.
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING, Any, Callable

import zmq

from ..bus import Client, KeyRing
from ..errors import InvalidRequest
from ..store import LmdbStore
from ._config import SupervisorConfig
from ._curve import is_loopback_host

if TYPE_CHECKING:
    from ..console import ConsoleServer

__all__ = ["parse_http", "check_http_bind", "client_endpoint", "start_console", "H11_MISSING"]

log = logging.getLogger("weft_actors.supervisor")

_WILDCARDS = {"*": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "[::1]"}

H11_MISSING = "--http needs the h11 package: pip install 'weft_actors[console]'"


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


def check_http_bind(config: SupervisorConfig) -> None:
    """Refuse a console reachable from other machines over plain HTTP: its token and every
    workflow's data would cross the network in clear. ``--insecure-http`` allows it, with a
    warning (e.g. behind a TLS proxy on the same host). A credential is needed there either
    way; CURVE on the front door does not stand for one."""
    assert config.http is not None
    host = parse_http(config.http)[0]
    if is_loopback_host(host) or config.http_cert:
        return
    if not config.insecure_http:
        raise InvalidRequest(
            f"refusing to serve the console on {host} over plain HTTP: give --http-cert and --http-key "
            f"(TLS), use a loopback host, or pass --insecure-http"
        )
    log.warning("console on %s over plain HTTP (--insecure-http): its token crosses the network in clear", host)


def client_endpoint(bind: str) -> str:
    """Where a client in this process reaches the front door bound at ``bind``: a wildcard
    host becomes loopback."""
    transport, sep, address = bind.partition("://")
    if transport != "tcp":
        return bind
    host, _, port = address.rpartition(":")
    return f"{transport}{sep}{_WILDCARDS.get(host, host)}:{port}"


def _tls(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def start_console(
    config: SupervisorConfig,
    *,
    store: LmdbStore,
    stats: Callable[[], dict[str, Any]],
    metrics: Callable[[], str],
    curve_public_key: bytes | None,
    keys: KeyRing | None,
) -> tuple[ConsoleServer, Client]:
    """Bind and start the console on ``config.http``; log its URL and (unless read from a
    file) its action token. ``OSError`` or ``ValueError`` if it cannot."""
    from ..console import Access, ConsoleServer, HttpLimits, new_token, read_token_file

    assert config.http is not None
    host, port = parse_http(config.http)
    token = read_token_file(config.http_token_file) if config.http_token_file else new_token()
    read_token = read_token_file(config.http_read_token_file) if config.http_read_token_file else None
    if read_token == token:
        raise ValueError("the read token must differ from the action token")
    # Reads are open only where the front door's are: on loopback without CURVE. Under CURVE a
    # keyless client cannot read over ZeroMQ, so it cannot through the console either.
    loopback = is_loopback_host(host) and curve_public_key is None
    names = {name.lower() for name in (*config.http_hosts, host)}
    access = Access(token, read_token, open_reads=loopback, hosts=frozenset(names), secure=config.http_cert is not None)
    tls = _tls(config.http_cert, config.http_key or config.http_cert) if config.http_cert else None
    limits = HttpLimits(max_connections=config.http_max_connections, timeout=config.http_timeout)
    curve: dict[str, Any] = {}
    if curve_public_key is not None and keys is not None:
        public, secret = zmq.curve_keypair()
        keys.admit(public)
        curve = {"curve_server_key": curve_public_key, "curve_public_key": public, "curve_secret_key": secret}
    client = Client(client_endpoint(config.bind), timeout=10.0, **curve)
    try:
        server = ConsoleServer(host, port, client=client, store=store, access=access, stats=stats, metrics=metrics, limits=limits, tls=tls)
    except OSError:
        client.close()
        raise
    server.start()
    reads = "open" if loopback else "need a token"
    if config.http_token_file:
        log.info("web console on %s (reads %s; action token from %s)", server.url, reads, config.http_token_file)
    else:
        log.info("web console on %s (reads %s; action token: %s)", server.url, reads, token)
    return server, client
