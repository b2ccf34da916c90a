"""CURVE: the front door's key pair and the authenticator that admits listed client keys."""

from __future__ import annotations

import logging

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from ..errors import InvalidRequest

__all__ = ["server_keys", "start_authenticator"]

log = logging.getLogger("weft_actors.supervisor")


def server_keys(secret_key_file: str) -> tuple[bytes, bytes]:
    """(secret, public) z85 keys from a ``*.key_secret`` file made by ``weft_actors keygen``."""
    public, secret = zmq.auth.load_certificate(secret_key_file)
    if secret is None:
        raise InvalidRequest(f"{secret_key_file} holds no secret key")
    return secret, public


def start_authenticator(context: zmq.Context, authorized_keys_dir: str | None) -> ThreadAuthenticator:
    """Admit only clients whose public key file lies in ``authorized_keys_dir``."""
    if not authorized_keys_dir:
        raise InvalidRequest("--curve-secret-key needs --curve-authorized-keys DIR")
    authenticator = ThreadAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve(domain="*", location=authorized_keys_dir)
    log.info("CURVE enabled; authorized keys from %s", authorized_keys_dir)
    return authenticator
