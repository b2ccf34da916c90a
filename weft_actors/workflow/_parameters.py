"""What arguments a workflow takes, read once from its signature when it is decorated.

A start carries its arguments by position only (``encode_args`` on the wire, ``*args`` in
``Engine.start``), and the run calls ``fn(ctx, *args)`` only when it is driven, after the start
committed: a wrong count would be accepted and fail later as ``TypeError``. The engine checks
the count first instead (``Parameters.problem``), so a mismatch is refused before anything is
written. ``inspect.signature`` is slow (microseconds); the start path pays two comparisons.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from typing import Any, Callable, cast

from ..errors import InvalidRequest

__all__ = ["Parameters", "parameters_of"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_DEFAULT_TEXT = 20
"""Characters of a default's ``repr`` shown in a message at most."""


@dataclasses.dataclass(frozen=True, slots=True)
class Parameters:
    """The positional arguments a workflow accepts after ``ctx``: between ``least`` and
    ``most`` (``sys.maxsize`` with ``*args``). A signature no start can satisfy (no ``ctx``
    parameter, a keyword-only parameter without a default) has ``least > most``, so the one
    range check refuses every count; ``problem`` then says why."""

    name: str
    text: str
    """The parameters after ``ctx`` as the user wrote them, defaults shortened: ``name, *rest``."""
    least: int
    most: int
    unfillable: str | None = None
    """Why no start can call the function (None if one can)."""

    def problem(self, count: int) -> str | None:
        """None if ``count`` positional arguments fit, else a message saying what does."""
        if self.least <= count <= self.most:
            return None
        signature = f"{self.name}({self.text})"
        if self.unfillable is not None:
            return f"{signature} cannot be started: {self.unfillable}"
        if self.least == self.most:
            takes = "no arguments" if self.most == 0 else _arguments(self.most)
        elif self.most == sys.maxsize:
            takes = f"at least {_arguments(self.least)}"
        else:
            takes = f"{self.least} to {self.most} arguments"
        return f"{signature} takes {takes}, {count} given"


    def refusal(self, count: int) -> InvalidRequest | None:
        """The ``InvalidRequest`` that refuses a start with ``count`` arguments (None if they
        fit), naming the workflow, its parameters and the count given."""
        if self.least <= count <= self.most:
            return None
        return InvalidRequest(cast(str, self.problem(count)), workflow_type=self.name, parameters=self.text, given=count)


def _arguments(count: int) -> str:
    return f"{count} argument" if count == 1 else f"{count} arguments"


def parameters_of(name: str, fn: Callable[..., Any]) -> Parameters:
    """Read ``fn``'s signature: its first positional parameter is ``ctx``, the rest are what
    a start passes. A signature that cannot be read (a builtin, say) accepts any count: the
    call itself then says what is wrong, as before."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return Parameters(name, "...", 0, sys.maxsize)
    params = list(signature.parameters.values())
    has_ctx = bool(params) and (params[0].kind in _POSITIONAL or params[0].kind == inspect.Parameter.VAR_POSITIONAL)
    if has_ctx and params[0].kind in _POSITIONAL:
        params = params[1:]  # ctx; a leading ``*args`` takes ctx and the rest alike
    text = ", ".join(_describe(param) for param in _with_markers(params))
    if not has_ctx:
        return Parameters(name, text, 1, 0, "it takes no ctx parameter (write `async def f(ctx, ...)`)")
    positional = [param for param in params if param.kind in _POSITIONAL]
    required = sum(1 for param in positional if param.default is inspect.Parameter.empty)
    most = sys.maxsize if any(param.kind == inspect.Parameter.VAR_POSITIONAL for param in params) else len(positional)
    keyword_only = [param.name for param in params if param.kind == inspect.Parameter.KEYWORD_ONLY and param.default is inspect.Parameter.empty]
    if keyword_only:
        names = ", ".join(repr(each) for each in keyword_only)
        why = f"keyword-only parameter {names} has no default, and a start passes its arguments by position"
        return Parameters(name, text, 1, 0, why)
    return Parameters(name, text, required, most)


def _with_markers(params: list[inspect.Parameter]) -> list[Any]:
    """``params`` with ``/`` and ``*`` where Python's own signature text has them."""
    out: list[Any] = []
    star = any(param.kind == inspect.Parameter.VAR_POSITIONAL for param in params)
    for index, param in enumerate(params):
        if param.kind == inspect.Parameter.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        out.append(param)
        following = params[index + 1] if index + 1 < len(params) else None
        if param.kind == inspect.Parameter.POSITIONAL_ONLY and (following is None or following.kind != inspect.Parameter.POSITIONAL_ONLY):
            out.append("/")
    return out


def _describe(param: Any) -> str:
    if isinstance(param, str):
        return param
    if param.kind == inspect.Parameter.VAR_POSITIONAL:
        return f"*{param.name}"
    if param.kind == inspect.Parameter.VAR_KEYWORD:
        return f"**{param.name}"
    if param.default is inspect.Parameter.empty:
        return param.name
    shown = repr(param.default)
    if len(shown) > _DEFAULT_TEXT:
        shown = shown[: _DEFAULT_TEXT - 3] + "..."
    return f"{param.name}={shown}"
