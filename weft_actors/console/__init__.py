"""The web console the supervisor serves with ``--http``: pages, a JSON API under ``/api``,
``/metrics`` and ``/healthz`` (``docs/operations.md``, "Web console")."""

from ._server import ConsoleServer
from ._token import new_token, read_token_file

__all__ = ["ConsoleServer", "new_token", "read_token_file"]
