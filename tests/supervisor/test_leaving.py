"""``_leaving.successor_of``: whom a shard of a stopping supervisor hands off to (real engines
on one LMDB store): a live peer outside its supervisor that registers every type of its app,
or nobody (then it releases, as at any stop)."""

from __future__ import annotations

from typing import Any

import pytest

from _support import run
from weft_actors import Engine, workflow
from weft_actors.supervisor._leaving import successor_of

pytestmark = pytest.mark.timeout(60)

OPTIONS: dict[str, Any] = {"heartbeat": 5.0, "ttl": 15.0}


@workflow
async def first(ctx) -> int:
    return 1


@workflow
async def second(ctx) -> int:
    return 2


def test_a_live_peer_outside_the_supervisor_running_the_apps_types_is_the_successor(tmp_path):
    async def main() -> None:
        async with (
            Engine(str(tmp_path), app=[first, second], **OPTIONS) as leaving,
            Engine(str(tmp_path), app=[first, second], **OPTIONS) as sibling,
            Engine(str(tmp_path), app=[first], **OPTIONS) as partial,
        ):
            assert successor_of(leaving, [leaving.engine_id, sibling.engine_id]) is None  # partial lacks ``second``
            async with Engine(str(tmp_path), app=[first, second], **OPTIONS) as peer:
                assert successor_of(leaving, [leaving.engine_id, sibling.engine_id]) == peer.engine_id
                assert successor_of(leaving, [leaving.engine_id, sibling.engine_id, peer.engine_id]) is None
                assert successor_of(leaving, []) in (sibling.engine_id, peer.engine_id)  # never itself
                assert partial.engine_id != successor_of(leaving, [])
            assert successor_of(leaving, [sibling.engine_id]) is None  # a stopped peer is not live

    run(main())
