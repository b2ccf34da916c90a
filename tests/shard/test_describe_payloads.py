"""``describe()`` shows what a workflow was sent and answered: a waited signal's payload, a
signal handler's argument, an update's arguments and result; and an op a race stopped is
``lost_race``, not an error (through an embedded engine here, through the supervisor in
``tests/console/test_browser_issue30.py``)."""

from __future__ import annotations

import asyncio
import time

import pytest

from _support import run
from console_app import ledger
from weft_actors import Engine

pytestmark = pytest.mark.timeout(30)


async def _until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.01)


def _ops(described: dict) -> dict[str, dict]:
    return {f"{op['kind']}:{op['name']}": op for op in described["history"]}


def test_describe_has_signal_payloads_update_args_and_results_and_race_losers_are_not_errors(tmp_path):
    async def main() -> None:
        async with Engine(str(tmp_path / "data"), app=[ledger]) as engine:
            handle = await engine.start(ledger, "ann", id="l-1")
            await handle.signal("item", {"sku": "<b>x</b>", "qty": 2})
            await handle.signal("note", "gift wrap")
            assert await handle.update("add", 5) == 5
            await handle.signal("close", None)
            await _until(lambda: engine.actors["l-1"].run.waiting_signal() == "finish")
            ops = _ops(await handle.describe())
            assert ops["signal:item"]["payload"] == {"sku": "<b>x</b>", "qty": 2}
            assert ops["handler:note"]["payload"] == "gift wrap"
            assert ops["update:add"]["args"] == [5] and ops["update:add"]["result"] == 5
            assert ops["signal:close"]["payload"] is None
            loser = next(op for op in ops.values() if op["kind"] == "sleep")
            assert loser["outcome"] == "lost_race" and "error" not in loser, loser
            assert all(op.get("outcome") != "error" for op in ops.values())

    run(main())
