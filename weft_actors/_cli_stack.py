"""``python -m weft_actors stack ID``: where a running workflow waits, printed like a Python
traceback (outermost call first), each awaited op under the innermost frame.

The data is ``describe()["stack"]`` through the handle's ``stack()``, so its errors are the
handle's: an unknown id is ``workflow_not_found``, a finished workflow ``workflow_closed``,
one whose code does not run (``pending``, ``quarantined``, ``stuck``) ``invalid_request``.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

__all__ = ["add_stack_command", "format_stack", "op_text"]

HELP = "show where a running workflow waits: each await's file, line and op"


def add_stack_command(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Declare ``stack ID`` with the CLI's ``command(name, help)`` (its common options)."""
    command("stack", HELP).add_argument("id")


def format_stack(wid: str, stack: list[dict[str, Any]]) -> str:
    lines = [f"workflow {wid} waits at (outermost call first):"]
    for frame in stack:
        lines.append(f'  File "{frame.get("file")}", line {frame.get("line")}, in {frame.get("function")}')
        for op in frame.get("waits_on") or ():
            lines.append(f"    -> {op_text(op)}")
        if frame.get("waits_on_omitted"):
            lines.append(f"    -> ... and {frame['waits_on_omitted']} more ops")
    return "\n".join(lines)


def op_text(op: dict[str, Any]) -> str:
    """One awaited op of a stack as text (the CLI's and the console's): ``activity 'charge'
    attempt 2, retries at <ISO> (op #3)``."""
    kind, name = op.get("kind"), op.get("name")
    text = f"{kind} {name!r}" if name else str(kind)
    if kind == "activity" and op.get("attempt"):
        text += f" attempt {op['attempt']}"
    if op.get("child_id"):
        text += f" id {op['child_id']!r}"
    predicate = op.get("predicate")
    if predicate:
        text += f" ({predicate.get('file')}:{predicate.get('line')})"
    if op.get("fire_at_iso"):
        what = {"retry": "retries at", "sleep": "fires at"}.get(op.get("timer") or "", "times out at")
        text += f", {what} {op['fire_at_iso']}"
    return f"{text} (op #{op.get('seq')})"
