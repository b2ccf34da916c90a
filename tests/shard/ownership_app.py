"""A child engine for the ownership process tests, and the workflows both sides run.

    python ownership_app.py DATA EVENTS [--heartbeat S] [--ttl S] [--no-probe] [--hang]

Reads JSON commands from stdin, one a line: ``{"cmd": "start", "workflow": ..., "args": [...],
"ids": [...], "at": wall_time?}``, ``{"cmd": "signal", "id": ..., "name": ..., "payload": ...}``,
``{"cmd": "report"}``, ``{"cmd": "close"}``. Writes JSON events, one a line, to EVENTS:
``ready``, ``started``/``start_error`` per id, ``report`` (the ids it drives), ``closed`` or
``deposed``. Exits 0 after a close, 3 when the engine was deposed. With ``--hang`` every
activity hangs (so a kill -9 catches the workflows in flight).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from typing import Any

from weft_actors import Engine, activity, workflow
from weft_actors.errors import WeftError

HANG = False
ACTIVITY_LOG = os.environ.get("WEFT_OWNERSHIP_LOG", "")
EXIT_DEPOSED = 3


def record(path: str, **event: Any) -> None:
    with open(path, "a") as out:
        out.write(json.dumps(event) + "\n")


@activity
async def slow(tag: str, seconds: float) -> int:
    """Logs its start; returns the pid of the process that ran it."""
    if ACTIVITY_LOG:
        record(ACTIVITY_LOG, event="activity", tag=tag, pid=os.getpid(), at=time.time())
    if HANG:
        await asyncio.sleep(3600)
    if seconds:
        await asyncio.sleep(seconds)
    return os.getpid()


@workflow
async def one_slow(ctx, tag: str, seconds: float) -> int:
    return await ctx.run(slow, tag, seconds)


@workflow
async def parked(ctx) -> Any:
    return await ctx.wait_signal("go")


APP = [one_slow, parked]


async def _start(engine: Engine, events: str, command: dict[str, Any]) -> None:
    if command.get("at"):
        await asyncio.sleep(max(0.0, command["at"] - time.time()))

    async def one(wid: str) -> None:
        try:
            await engine.start(command["workflow"], *command.get("args", []), id=wid)
        except WeftError as exc:
            record(events, event="start_error", id=wid, code=exc.code)
        else:
            record(events, event="started", id=wid)

    await asyncio.gather(*(one(wid) for wid in command["ids"]))


async def serve(args: argparse.Namespace) -> int:
    engine = Engine(args.data, app=APP, heartbeat=args.heartbeat, ttl=args.ttl, probe_peers=args.probe)
    await engine.open()
    record(args.events, event="ready", engine_id=engine.engine_id, pid=os.getpid())
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip():
                loop.call_soon_threadsafe(commands.put_nowait, json.loads(line))
        loop.call_soon_threadsafe(commands.put_nowait, {"cmd": "close"})

    threading.Thread(target=read_stdin, daemon=True).start()
    stopped = asyncio.ensure_future(engine.wait_stopped())
    tasks: set[asyncio.Task[Any]] = set()
    while True:
        get = asyncio.ensure_future(commands.get())
        await asyncio.wait({get, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if stopped.done():
            get.cancel()
            record(args.events, event=engine.state, stats={"commits_total": engine.stats()["commits_total"]})
            return EXIT_DEPOSED if engine.state == "deposed" else 0
        command = get.result()
        if command["cmd"] == "start":
            task = asyncio.ensure_future(_start(engine, args.events, command))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif command["cmd"] == "signal":
            await engine.signal(command["id"], command["name"], command.get("payload"))
            record(args.events, event="signaled", id=command["id"])
        elif command["cmd"] == "report":
            record(args.events, event="report", actors=sorted(engine.actors), stats=engine.stats())
        elif command["cmd"] == "close":
            await engine.close()
            record(args.events, event="closed")
            return 0


def main() -> None:
    global HANG
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("events")
    parser.add_argument("--heartbeat", type=float, default=0.2)
    parser.add_argument("--ttl", type=float, default=0.6)
    parser.add_argument("--no-probe", dest="probe", action="store_false")
    parser.add_argument("--hang", action="store_true")
    args = parser.parse_args()
    HANG = args.hang
    sys.exit(asyncio.run(serve(args)))


if __name__ == "__main__":
    main()
