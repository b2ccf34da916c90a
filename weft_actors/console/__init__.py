"""The web console the supervisor serves with ``--http``: pages, a JSON API under ``/api``,
``/metrics`` and ``/healthz`` (``docs/operations.md``, "Web console"). It needs h11 (the
``console`` extra)."""

from ._access import Access
from ._http import HttpLimits
from ._server import ConsoleServer
from ._token import new_token, read_token_file

__all__ = ["Access", "ConsoleServer", "HttpLimits", "new_token", "read_token_file"]
