"""How the command line reports a failure: ``error: <code>: <message>`` on stderr with a hint
for the mistakes of the first hour, or, with ``--json``, one JSON document on stdout (a script
reads every outcome the same way); and a closed pipe (``| head``) ends it quietly.

The hints tell apart what looks alike from the client's side: nothing listening (no
supervisor there) from a listener that never answers (most often a CURVE mismatch: the
server drops a handshake it does not accept without a word).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import NoReturn, Sequence

from .errors import OutcomeUnknown, ServerUnavailable, WeftError, WorkflowAlreadyExists

__all__ = ["Parser", "UsageError", "hints", "print_error", "print_failure", "print_usage_error", "quiet_broken_pipe"]

_FINISHED = frozenset({"completed", "failed", "cancelled", "terminated", "timed_out", "continued"})
_NO_SUPERVISOR = (
    "is a supervisor running there? Start one with `python -m weft_actors.supervisor`, "
    "or name its endpoint with --endpoint (or WEFT_ENDPOINT), e.g. tcp://127.0.0.1:5555"
)


def hints(exc: WeftError, *, curve: bool) -> list[str]:
    """What to try for ``exc``; ``curve``: whether this client used CURVE keys."""
    if isinstance(exc, ServerUnavailable) and not isinstance(exc, OutcomeUnknown):
        if getattr(exc, "listening", True) is False:
            return [_NO_SUPERVISOR]
        if curve:
            return [
                "something listens there but did not answer: with CURVE, check that --curve-server-key is "
                "the server's public key and that your key (--curve-key) is authorised (its public .key file "
                "in the server's --curve-authorized-keys directory); the supervisor logs refused keys",
                _NO_SUPERVISOR,
            ]
        return [
            "something listens there but did not answer: a supervisor that uses CURVE ignores a client "
            "without it; pass --curve-server-key FILE (its public key) and --curve-key FILE (your .key_secret)",
            _NO_SUPERVISOR,
        ]
    status = getattr(exc, "status", None)
    if isinstance(exc, WorkflowAlreadyExists) and status in _FINISHED:
        return [f"that run has finished ({status}); to run the id again, pass --if-exists start_new"]
    return []


def print_error(exc: WeftError, *, as_json: bool, curve: bool) -> None:
    print_failure(exc.code, exc.message, hints(exc, curve=curve), as_json=as_json)


def print_failure(code: str, message: str, shown_hints: Sequence[str] = (), *, as_json: bool) -> None:
    """``error: CODE: MESSAGE`` and its hints on stderr, or the JSON document on stdout."""
    if as_json:
        print(json.dumps({"error": {"code": code, "message": message, "hints": list(shown_hints)}}, default=str, ensure_ascii=False))
        return
    print(f"error: {code}: {message}", file=sys.stderr)
    for hint in shown_hints:
        print(f"hint: {hint}", file=sys.stderr)


def quiet_broken_pipe() -> None:
    """After the reader of stdout went away (``| head``): point stdout at /dev/null, so the
    interpreter's final flush does not print a BrokenPipeError traceback at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # not a real file (captured): nothing will flush into a pipe
        pass
    finally:
        os.close(devnull)


class UsageError(Exception):
    """A command line argparse refused: its message and the usage of the (sub)command."""

    def __init__(self, message: str, usage: str, prog: str) -> None:
        super().__init__(message)
        self.message, self.usage, self.prog = message, usage, prog


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` (and, through ``parser_class``, each of its subcommands') whose
    usage error is raised, not printed: ``main`` prints it as argparse would, or as a JSON
    document under ``--json``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage(), self.prog)


def print_usage_error(exc: UsageError, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": {"code": "usage", "message": f"{exc.prog}: {exc.message}", "hints": [exc.usage.strip()]}}, ensure_ascii=False))
        return
    sys.stderr.write(f"{exc.usage}{exc.prog}: error: {exc.message}\n")
