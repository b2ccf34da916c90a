"""``python -m weft_actors shards list|restart``: the supervisor's shards, and a rolling restart.

``restart`` asks the supervisor for a rolling restart and, unless ``--no-wait``, follows it
(``shards list`` every half second, a line per shard replaced) to its end: exit 0 once every
shard was replaced, 1 (``roll_failed``, naming the workflow and the op that no longer replays
for a refused deploy) when it stopped. ``shards`` is admin-only under CURVE.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable, TextIO

from ._cli_output import emit
from .errors import RollFailed

__all__ = ["add_shards_command", "run_shards", "shards_table"]

POLL = 0.5


def add_shards_command(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Declare ``shards ACTION`` with the CLI's ``command(name, help)`` (its common options)."""
    p = command("shards", "list the supervisor's shards, or replace them one at a time (restart)")
    p.add_argument("action", choices=("list", "restart"), help="list: each shard's slot, pid, engine, workflows, state; restart: a rolling restart")
    p.add_argument("--no-wait", action="store_true", help="restart: return once the roll is accepted, without following it")


def shards_table(listing: dict[str, Any]) -> str:
    lines = [f"{'SLOT':<5} {'PID':<8} {'ENGINE':<34} {'OWNED':>7} {'IN FLIGHT':>10}  STATE"]
    for shard in listing["shards"]:
        owned = "-" if shard.get("owned") is None else shard["owned"]
        in_flight = "-" if shard.get("in_flight") is None else shard["in_flight"]
        lines.append(f"{shard['slot']:<5} {shard['pid'] or '-'!s:<8} {shard['engine_id'] or '-':<34} {owned!s:>7} {in_flight!s:>10}  {shard['state']}")
    roll = listing["roll"]
    lines.append(f"rolling restart: {roll['progress']}")
    if roll.get("last"):
        last = roll["last"]
        lines.append(f"last rolling restart: {last['outcome']} after {last['duration_s']}s: {last['message']}")
    return "\n".join(lines)


def run_shards(args: argparse.Namespace, out: TextIO, client: Any) -> None:
    if args.action == "list":
        listing = client.shards("list")
        emit(args, out, listing, shards_table(listing))
        return
    accepted = client.shards("restart")
    if args.no_wait:
        emit(args, out, accepted, f"rolling restart {accepted['roll']} accepted")
        return
    last = _follow(args, out, client, accepted["roll"])
    if last["outcome"] != "completed":
        raise RollFailed(f"rolling restart {last['outcome']}: {last['message']}", **{k: v for k, v in last.items() if k in ("workflow", "replaced")})
    emit(args, out, last, f"rolling restart completed in {last['duration_s']}s: {last['message']}")


def _follow(args: argparse.Namespace, out: TextIO, client: Any, number: int) -> dict[str, Any]:
    """Poll until roll ``number`` ended; a line per change of progress (not with ``--json``)."""
    shown = ""
    while True:
        roll = client.shards("list")["roll"]
        last = roll.get("last")
        if last is not None and last.get("roll") == number:
            return dict(last)
        if roll["progress"] != shown and not args.json:
            shown = roll["progress"]
            out.write(f"rolling restart: {shown}\n")
            out.flush()
        time.sleep(POLL)
