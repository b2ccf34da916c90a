"""A client given several supervisors' endpoints keeps the answers a stopping supervisor sent
it before it exited, even when its loop reads them only after the connection ended: the
start landed and was answered, so its answer is the start's, never ``OutcomeUnknown`` (nor a
resend to the next supervisor)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from _processes import RunningSupervisor, free_port, wait_until
from weft_actors import AsyncClient, Client
from weft_actors.bus._frames import readable

pytestmark = pytest.mark.timeout(60)


def test_an_answer_read_only_after_its_supervisor_stopped_is_still_the_answer(tmp_path: Path) -> None:
    with RunningSupervisor(tmp_path / "data", shards=1) as sup:
        outcome, held = asyncio.run(_hold_the_loop_over_a_stop(sup))
        assert sup.wait(30) == 0
    assert held  # the loop was held with the start answered and not read
    assert outcome == "landed", outcome


async def _hold_the_loop_over_a_stop(sup: RunningSupervisor) -> tuple[object, bool]:
    async with AsyncClient([sup.endpoint, f"tcp://127.0.0.1:{free_port()}"], timeout=30) as client:
        assert await client.ping() == "pong"
        transport = client._transport
        link = transport.link
        assert link is not None
        call = asyncio.ensure_future(client.start("three_steps", 7, id="landed"))  # a fixed id: not resendable as it is
        while not link.sent:  # sent (the link is up: no wait), its reply not read yet
            await asyncio.sleep(0)
        # Held here, the loop reads nothing until the supervisor has answered the start,
        # stopped, and the client's zmq thread has seen its connection end.
        with Client(sup.endpoint, timeout=10) as other:
            wait_until(lambda: other.list(type="three_steps")["items"], 10, "the start committed")
        sup.process.send_signal(signal.SIGTERM)
        wait_until(lambda: readable(link.watch.monitor), 30, "the connection ended")
        held = not call.done()
        transport._watch_link(link)  # the loss taken in before the socket is read
        try:
            return (await call).id, held
        except Exception as exc:  # noqa: BLE001 - the assertion names it
            return exc, held
