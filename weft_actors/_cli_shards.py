"""``python -m weft_actors shards list|restart|set N``: the supervisor's shards, a rolling
restart, a live resize.

``restart`` (and ``set N``) asks the supervisor and, unless ``--no-wait``, follows it
(``shards list`` every half second, a line per change of progress) to its end: exit 0 once
done, 1 (``roll_failed``, naming the workflow and the op that no longer replays for a refused
deploy) when it stopped. ``shards`` is admin-only under CURVE.
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
    p.add_argument("action", choices=("list", "restart", "set"), help="list: each shard's slot, pid, engine, workflows, state; restart: a rolling restart; set N: grow or shrink to N shards")
    p.add_argument("count", nargs="?", type=int, metavar="N", help="set: the number of shards (at least 1)")
    p.add_argument("--no-wait", action="store_true", help="restart, set: return once accepted, without following it")


def shards_table(listing: dict[str, Any]) -> str:
    lines = [f"{'SLOT':<5} {'PID':<8} {'ENGINE':<34} {'OWNED':>7} {'IN FLIGHT':>10}  STATE"]
    for shard in listing["shards"]:
        owned = "-" if shard.get("owned") is None else shard["owned"]
        in_flight = "-" if shard.get("in_flight") is None else shard["in_flight"]
        lines.append(f"{shard['slot']:<5} {shard['pid'] or '-'!s:<8} {shard['engine_id'] or '-':<34} {owned!s:>7} {in_flight!s:>10}  {shard['state']}")
    roll = listing["roll"]
    lines.append(f"rolling restart or resize: {roll['progress']}")
    if roll.get("last"):
        last = roll["last"]
        lines.append(f"last ({last['source']}): {last['outcome']} after {last['duration_s']}s: {last['message']}")
    return "\n".join(lines)


def run_shards(args: argparse.Namespace, out: TextIO, client: Any) -> None:
    if args.action == "list":
        listing = client.shards("list")
        emit(args, out, listing, shards_table(listing))
        return
    accepted = client.shards(args.action, args.count if args.action == "set" else None)
    what = "rolling restart" if args.action == "restart" else f"resize to {args.count} shards"
    if args.no_wait:
        emit(args, out, accepted, f"{what} accepted")
        return
    last = _follow(args, out, client, accepted["roll"])
    if last["outcome"] != "completed":
        raise RollFailed(f"{what} {last['outcome']}: {last['message']}", **{k: v for k, v in last.items() if k in ("workflow", "replaced")})
    emit(args, out, last, f"{what} completed in {last['duration_s']}s: {last['message']}")


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
            out.write(f"shards: {shown}\n")
            out.flush()
        time.sleep(POLL)
