"""The console's tokens: the action token, what a POST must carry to change anything, and
the optional read token (``_access`` says who may read what, and where).

Cancelling, terminating, signalling or lifting a quarantine needs the token the supervisor
prints on stderr at start (or reads from ``--http-token-file``). The server never writes a
token into a page, so reading the console does not grant acting on it, and another site's
page cannot forge a POST (it cannot know the token).
"""

from __future__ import annotations

import hmac
import secrets

__all__ = ["new_token", "read_token_file", "token_matches"]

_MIN_LENGTH = 16


def new_token() -> str:
    """A fresh random token (32 URL-safe characters, 192 bits)."""
    return secrets.token_urlsafe(24)


def read_token_file(path: str) -> str:
    """The token in ``path`` (surrounding whitespace dropped); ``ValueError`` if the file
    cannot be read or holds a token shorter than 16 characters (easy to guess)."""
    try:
        with open(path, encoding="utf-8") as handle:
            token = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the console token file {path!r}: {exc}") from None
    if len(token) < _MIN_LENGTH:
        raise ValueError(f"the console token in {path!r} must be at least {_MIN_LENGTH} characters")
    return token


def token_matches(expected: str, given: str | None) -> bool:
    """Whether ``given`` is the token, compared in constant time."""
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())
