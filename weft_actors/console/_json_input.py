"""JSON typed into the console (a query's arguments, a signal's payload, an API body), read
so that no text makes a request fail as the server's error.

``json.loads`` raises ``ValueError`` for what is not JSON, but ``RecursionError`` for JSON
nested deeper than its parser recurses (``[[[[...]]]]``, a few kilobytes): both are the
sender's mistake, so both are ``InvalidRequest`` (400, ``invalid_request``) for that request
alone, never the 500 of an unexpected exception with a traceback in the supervisor's log.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidRequest

__all__ = ["json_input"]


def json_input(text: str | bytes, what: str, example: str, expected: str = "JSON") -> Any:
    """The JSON value of ``text``; ``InvalidRequest`` saying that ``what`` must be
    ``expected`` (as ``example`` shows) or is nested too deeply."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(f"{what} must be {expected} (e.g. {example}): {exc}") from None
    except RecursionError:
        raise InvalidRequest(f"{what} is nested too deeply to read ({len(text)} characters)") from None
