"""CURVE and who may connect: the front door's key pair, the authenticator that admits the
listed client keys, and the refusal to serve a non-loopback endpoint without CURVE."""

from __future__ import annotations

import ipaddress
import logging

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from ..bus import KeyRing
from ..errors import InvalidRequest
from ._zap_log import LoggedKeys

__all__ = ["server_keys", "start_authenticator", "is_loopback", "is_loopback_host", "check_bind"]

log = logging.getLogger("weft_actors.supervisor")


def server_keys(secret_key_file: str) -> tuple[bytes, bytes]:
    """(secret, public) z85 keys from a ``*.key_secret`` file made by ``weft_actors keygen``."""
    public, secret = zmq.auth.load_certificate(secret_key_file)
    if secret is None:
        raise InvalidRequest(f"{secret_key_file} holds no secret key")
    return secret, public


def start_authenticator(
    context: zmq.Context, authorized_keys_dir: str | None, readonly_keys_dir: str | None = None
) -> tuple[ThreadAuthenticator, KeyRing]:
    """Admit only clients whose public key file lies in ``authorized_keys_dir`` (full access)
    or ``readonly_keys_dir`` (read calls only); the ``KeyRing`` goes to the front door, which
    checks every request against the keys as they are now."""
    if not authorized_keys_dir:
        raise InvalidRequest("--curve-secret-key needs --curve-authorized-keys DIR")
    keys = KeyRing(authorized_keys_dir, readonly_keys_dir)
    authenticator = ThreadAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve_callback(domain="*", credentials_provider=LoggedKeys(keys))
    log.info(
        "CURVE enabled; full-access keys from %s, read-only keys from %s",
        authorized_keys_dir,
        readonly_keys_dir or "(none)",
    )
    return authenticator, keys


def is_loopback(endpoint: str) -> bool:
    """Whether only this machine can reach ``endpoint``: ``ipc://``/``inproc://``, or TCP on a
    loopback address or ``localhost``. Wildcards, interface names and other host names are
    not (a name could resolve anywhere)."""
    transport, _, address = endpoint.partition("://")
    if transport in ("ipc", "inproc"):
        return True
    if transport != "tcp":
        return False
    return is_loopback_host(address.rpartition(":")[0].strip("[]"))


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (a name could resolve anywhere)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(endpoint: str, curve: bool, insecure: bool) -> None:
    """Refuse a front door reachable from other machines without CURVE: without it any client
    that connects may list, cancel and terminate every workflow. ``insecure`` (the
    ``--insecure-bind`` flag) allows it, with a warning."""
    if curve or is_loopback(endpoint):
        return
    if not insecure:
        raise InvalidRequest(
            f"refusing to bind {endpoint} without CURVE: any client that can reach it could "
            f"cancel and terminate every workflow. Use --curve-secret-key and "
            f"--curve-authorized-keys, bind a loopback address, or pass --insecure-bind",
            endpoint=endpoint,
        )
    log.warning(
        "front door on %s without CURVE (--insecure-bind): any client that can reach it has full access",
        endpoint,
    )
