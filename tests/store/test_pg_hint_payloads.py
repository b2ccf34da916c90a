"""A large batch's hints reach other processes' engines line by line, never as one "look at
everything" (``store/_pg/_hints``): that would have every other engine run a maintenance pass
(a feed poll on its loop) for workflows it does not hold.

Two stores on one real server: one commits, the other listens as another host's engine does.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from weft_actors.codec import encode, encode_args
from weft_actors.store import Created, CreateWorkflow, Finish, StepCommit
from weft_actors.testing import FakeClock

WORKFLOWS = 400
"""Their ending lines come to about 20 kB: well past one notification's 8000 bytes."""


def _store(schema_url: str) -> Any:
    from weft_actors.store._pg import PgStore

    return PgStore(schema_url, clock=FakeClock())


@pytest.mark.timeout(60)
def test_a_large_batch_hints_every_workflow_by_name(schema_url: str) -> None:
    writer, listener = _store(schema_url), _store(schema_url)
    heard: list[tuple[str | None, str]] = []
    lock = threading.Lock()

    def on_hint(hints: list[tuple[str | None, str]]) -> None:
        with lock:
            heard.extend(hints)

    try:
        listener.listen(on_hint)
        engine = uuid.uuid4().hex
        writer.register_engine(engine, heartbeat=0.5, ttl=3.0)
        wids = [f"hinted-workflow-{uuid.uuid4().hex}-{i}" for i in range(WORKFLOWS)]
        intents = [CreateWorkflow(wid, "Order", encode_args((i,)), uuid.uuid4().hex) for i, wid in enumerate(wids)]
        deadline = time.monotonic() + 10
        created = writer.apply(engine, intents)
        assert all(isinstance(result, Created) for result in created), created
        with lock:
            heard.clear()  # the listener may have started after the creates: only the endings count
        steps = [StepCommit(intent.wid, result.epoch, intent.run_id, finish=Finish("completed", result=encode(1))) for intent, result in zip(intents, created)]
        finished = writer.apply(engine, steps)
        assert not [result for result in finished if isinstance(result, Exception)], finished
        while time.monotonic() < deadline:
            with lock:
                done = {wid for wid, kind in heard if kind == "workflow-done"}
                everything = [hint for hint in heard if hint[0] is None]
            if everything or done >= set(wids):
                break
            time.sleep(0.02)
        assert everything == [], "a large batch was hinted as 'look at everything'"
        assert done >= set(wids), f"{len(set(wids) - done)} of {WORKFLOWS} endings were not hinted"
    finally:
        listener.close()
        writer.close()


def test_payloads_stay_under_the_server_limit() -> None:
    from weft_actors.store._pg._hints import PAYLOAD_LIMIT, hinted

    # ``notify_payloads`` chunks lines; each chunk parses back to its own lines.
    from weft_actors.store._pg import _hints

    lines = [f"d wf-{'é' * (i % 40)}-{i}" for i in range(2000)]
    payloads = _hints._chunked(lines)
    assert all(len(payload.encode()) <= PAYLOAD_LIMIT for payload in payloads)
    assert [wid for payload in payloads for wid, _ in hinted(payload)] == [line[2:] for line in lines]
