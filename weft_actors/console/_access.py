"""Who may read and who may act on the console: the Host allow-list, the Origin check on
POSTs, and the credentials (the action token, an optional read token, the login cookie).

A request is checked here before any route runs, so no page or API answer can be reached
around it. The rules:

- ``Host`` must name the console: an IP literal, ``localhost`` or a name given with
  ``--http-host``. A page on another site that rebinds its own name to the console's address
  (DNS rebinding) sends that name as ``Host`` and is refused before it reads anything. An IP
  literal cannot be rebound, so every one passes.
- A POST that carries ``Origin`` must come from the console's own origin: another site's page
  cannot make the browser act (or log in) even with the login cookie in the jar.
- On a loopback console without CURVE reads need nothing (as on the client endpoint there)
  and actions need the action token. Anywhere else (another host, or CURVE on the front
  door, which a keyless client could otherwise read around) every request but ``/healthz``
  needs a credential: the
  action token (read and act) or the read token (read only), as ``Authorization: Bearer``,
  ``X-Weft-Token`` or the login cookie. The cookie holds a keyed digest of the token, never
  the token, and is ``HttpOnly`` and ``SameSite=Strict`` (``Secure`` under TLS).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
from http.cookies import CookieError, SimpleCookie
from typing import Mapping
from urllib.parse import urlsplit

from ._token import token_matches

__all__ = ["Access", "Grant", "COOKIE"]

COOKIE = "weft_console"

Grant = str
"""``"act"`` (the action token), ``"read"`` (the read token, or a loopback console's open
reads) or ``""`` (nothing)."""


def _cookie_value(token: str) -> str:
    return hmac.new(token.encode(), b"weft-console-login", hashlib.sha256).hexdigest()


def _hostname(value: str) -> str:
    """``value`` (a ``Host`` header or an origin's netloc) without its port, lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class Access:
    """The console's access rules (see the module docstring); ``token`` acts, ``read_token``
    (if any) only reads, ``open_reads`` lets anybody read (a loopback console, no CURVE)."""

    token: str
    read_token: str | None = None
    open_reads: bool = True
    hosts: frozenset[str] = frozenset()
    """Names besides IP literals and ``localhost`` that ``Host`` may carry (lower-case)."""
    secure: bool = False
    """Whether the console serves TLS: the cookie is then ``Secure``, origins ``https``."""

    def host_allowed(self, host: str | None) -> bool:
        if not host:
            return False
        name = _hostname(host)
        return name == "localhost" or name in self.hosts or _is_ip(name)

    def origin_allowed(self, origin: str | None, host: str) -> bool:
        """A POST's ``Origin``: absent (not a browser) or the console's own scheme and host."""
        if origin is None:
            return True
        parts = urlsplit(origin)
        scheme = "https" if self.secure else "http"
        return parts.scheme == scheme and parts.netloc.lower() == host.strip().lower()

    def grant(self, headers: Mapping[str, str], form_token: str | None = None) -> Grant:
        """What the request's credentials allow: ``"act"``, ``"read"`` or ``""``."""
        given = [form_token, headers.get("x-weft-token"), _bearer(headers.get("authorization"))]
        if any(token_matches(self.token, value) for value in given):
            return "act"
        cookie = _cookie(headers.get("cookie"))
        if cookie is not None and hmac.compare_digest(cookie, _cookie_value(self.token)):
            return "act"
        if self.read_token is not None:
            if any(token_matches(self.read_token, value) for value in given):
                return "read"
            if cookie is not None and hmac.compare_digest(cookie, _cookie_value(self.read_token)):
                return "read"
        return "read" if self.open_reads else ""

    def login_cookie(self, given: str) -> tuple[Grant, str | None]:
        """``(grant, Set-Cookie value)`` for a token typed on the login page; ``("", None)``
        if it is neither token."""
        if token_matches(self.token, given):
            grant, token = "act", self.token
        elif self.read_token is not None and token_matches(self.read_token, given):
            grant, token = "read", self.read_token
        else:
            return "", None
        return grant, self._set_cookie(_cookie_value(token), None)

    def logout_cookie(self) -> str:
        return self._set_cookie("", 0)

    def _set_cookie(self, value: str, max_age: int | None) -> str:
        text = f"{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict"
        if max_age is not None:
            text += f"; Max-Age={max_age}"
        return text + ("; Secure" if self.secure else "")


def _bearer(header: str | None) -> str | None:
    if header and header.lower().startswith("bearer "):
        return header[7:].strip()
    return None


def _cookie(header: str | None) -> str | None:
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return None if morsel is None else morsel.value
