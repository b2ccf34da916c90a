"""CURVE key handling shared by ``Client``, ``AsyncClient`` and the CLI.

A key may be given as its 40-character z85 text (``bytes`` or ``str``) or as the path of a
certificate file written by ``zmq.auth.create_certificates``. Resolving keys once, up front,
means a bad key is a ``ValueError`` at construction, not a silent handshake failure that
only shows up as a request timeout.
"""

from __future__ import annotations

import os
from typing import Final, NamedTuple

import zmq
import zmq.auth
from zmq.utils import z85

__all__ = ["CurveKeys", "load_key", "resolve_curve", "apply_curve", "connect_client"]

_Z85_KEY_LEN: Final = 40


class CurveKeys(NamedTuple):
    """The three keys a CURVE client socket needs, all z85 bytes."""

    server: bytes
    public: bytes
    secret: bytes


def _as_z85(value: bytes | str) -> bytes | None:
    raw = value.encode("ascii", "replace") if isinstance(value, str) else bytes(value)
    if len(raw) != _Z85_KEY_LEN:
        return None
    try:
        if len(z85.decode(raw)) != 32:
            return None
    except Exception:
        return None
    return raw


def _load_file(path: str | os.PathLike[str]) -> tuple[bytes, bytes | None]:
    if not os.path.isfile(path):
        raise ValueError(f"CURVE key {os.fspath(path)!r} is neither a z85 key nor a key file")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except Exception as exc:
        raise ValueError(f"cannot read CURVE key file {os.fspath(path)!r}: {exc}") from None
    return public, secret


def load_key(value: bytes | str | os.PathLike[str], *, secret: bool = False) -> bytes:
    """One z85 key from ``value`` (z85 text or a certificate file); with ``secret=True`` the
    file must be a ``.key_secret`` file and its secret half is returned."""
    if isinstance(value, (bytes, str)):
        key = _as_z85(value)
        if key is not None and not os.path.isfile(value):
            return key
    public_key, secret_key = _load_file(os.fsdecode(value) if isinstance(value, bytes) else value)
    if not secret:
        return public_key
    if secret_key is None:
        raise ValueError(f"CURVE key file {os.fspath(value)!r} holds no secret key (use the .key_secret file)")
    return secret_key


def resolve_curve(
    server_key: bytes | str | os.PathLike[str] | None,
    public_key: bytes | str | os.PathLike[str] | None = None,
    secret_key: bytes | str | os.PathLike[str] | None = None,
) -> CurveKeys | None:
    """The client's CURVE keys, or ``None`` when CURVE is off (no ``server_key``).

    Without a client key pair an ephemeral one is generated: the connection is encrypted but
    the server can only admit it if it allows any client key. A secret key file alone is
    enough (it holds both halves); a z85 secret key alone gets its public half derived.
    """
    if server_key is None:
        if public_key is not None or secret_key is not None:
            raise ValueError("a CURVE client key pair needs curve_server_key too")
        return None
    if not zmq.has("curve"):
        raise ValueError("this libzmq was built without CURVE support")
    server = load_key(server_key)
    if secret_key is None:
        if public_key is not None:
            raise ValueError("curve_public_key needs curve_secret_key")
        public, secret = zmq.curve_keypair()
        return CurveKeys(server, public, secret)
    secret = load_key(secret_key, secret=True)
    public = load_key(public_key) if public_key is not None else zmq.curve_public(secret)
    return CurveKeys(server, public, secret)


def apply_curve(socket: zmq.Socket, keys: CurveKeys | None) -> None:
    """Configure ``socket`` as a CURVE client; must run before ``connect``."""
    if keys is None:
        return
    socket.curve_serverkey = keys.server
    socket.curve_publickey = keys.public
    socket.curve_secretkey = keys.secret


def connect_client(socket: zmq.Socket, endpoint: str, keys: CurveKeys | None) -> None:
    """Configure ``socket`` as a (CURVE, if ``keys``) client and connect it to ``endpoint``;
    ``ValueError`` (the socket closed) if the endpoint cannot be connected to."""
    apply_curve(socket, keys)
    try:
        socket.connect(endpoint)
    except zmq.ZMQError as exc:
        socket.close(linger=0)
        raise ValueError(f"cannot connect to {endpoint!r}: {exc}") from None
