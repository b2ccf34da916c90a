"""On PostgreSQL a message sent through one engine reaches the workflow's owner in another
process or host at once, through the committing transaction's ``NOTIFY``: not at the owner's
next feed poll, which here comes only every 5 s."""

from __future__ import annotations

import time

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow

pytestmark = pytest.mark.timeout(60)

POLL = 5.0
"""The heartbeat, and so the feed poll's interval: far above what a hint takes."""


@workflow
async def waits_for_go(ctx) -> str:
    return await ctx.wait_signal("go")



def test_a_signal_through_another_engine_reaches_the_owner_before_its_next_poll(schema_url):
    async def main() -> None:
        options = {"heartbeat": POLL, "ttl": 3 * POLL}
        async with Engine(store=schema_url, app=[waits_for_go], **options) as owner, Engine(store=schema_url, app=[waits_for_go], **options) as other:
            await owner.start(waits_for_go, id="w")
            await eventually(lambda: "w" in owner.actors)
            sent = time.monotonic()
            await other.signal("w", "go", "now")
            assert await owner.get_handle("w").result(timeout=POLL - 1) == "now"
            assert time.monotonic() - sent < 2.0
            # The caller on the other engine hears of the end by hint too, not by polling.
            assert await other.get_handle("w").result(timeout=POLL - 1) == "now"

    run(main())
