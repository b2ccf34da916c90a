"""A signal sent again under the same request id (a client's resend after its supervisor went
silent) is delivered once; under another id it is another signal. Whether the owner took it
directly (parked on ``wait_signal``) or from its inbox."""

from __future__ import annotations

import pytest

from _support import run
from weft_actors import Engine, workflow

pytestmark = pytest.mark.timeout(30)


@workflow
async def counter(ctx) -> list[str]:
    seen = []
    while (value := await ctx.wait_signal("item")) != "stop":
        seen.append(value)
    return seen


def test_a_signal_repeated_under_its_request_id_is_delivered_once(tmp_path) -> None:
    async def main() -> None:
        async with Engine(str(tmp_path / "data"), app=[counter]) as engine:
            handle = await engine.start(counter, id="counter-1")
            await engine.signal("counter-1", "item", "a", request_id="r-a")
            await engine.signal("counter-1", "item", "a", request_id="r-a")  # the resend
            await engine.signal("counter-1", "item", "b", request_id="r-b")
            await engine.signal("counter-1", "item", "b", request_id="r-b")
            await engine.signal("counter-1", "item", "c")  # no id: as before
            await engine.signal("counter-1", "item", "stop", request_id="r-stop")
            assert await handle.result(timeout=20) == ["a", "b", "c"]

    run(main())
