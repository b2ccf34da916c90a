"""Clients and two supervisors ("hosts") sharing one PostgreSQL schema.

Each supervisor serves every workflow through the shared store: a start is committed (and
owned) by the shard that takes it, a signal or update goes to the durable inbox its owner
polls, and results, queries and descriptions are read (or replayed) from the store. So:

- a client given both endpoints keeps working when the first host is killed (``kill -9`` of
  its whole process group): its connection breaks, the client fails over to the second
  host at once, and that host takes the dead one's workflows over (their engines' advisory
  locks are free: no need to wait for the leases), and every workflow completes;
- the same when the first host is frozen (``SIGSTOP``): its connection stays up, so the
  client fails over when a request gets no reply within its timeout (a signal caught in
  flight goes on too: its request id lets the store drop a repeat), and the workflows are
  taken over once their leases lapse (``TIMING``);
- a request to the host that does not own a workflow is answered correctly;
- a client given one endpoint reports its dead supervisor clearly, without hanging.

Loads are small (tens of workflows): the PostgreSQL store is new and not fast yet. The
timings measured (failover, takeover) are logged at INFO (``-o log_cli=true``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import psycopg
import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import AsyncClient, Client
from weft_actors.errors import OutcomeUnknown, ServerUnavailable, WorkflowNotFound, WorkflowTerminated

log = logging.getLogger("client_failover")

TIMING = ("--heartbeat", "0.5", "--ttl", "3")
"""The defaults, said out loud: a dead host's leases lapse about ttl + heartbeat after its
last renewal, and then the survivor's reclaim pass takes its workflows over."""
ORDER_RESULT = {"charge": "charge-o-1-250", "approved": True}


@pytest.fixture
def store_url(schema_url: str) -> str:
    """A fresh schema of the session's server, as the store of every supervisor in the test."""
    return schema_url


@contextlib.contextmanager
def two_hosts(store_url: str, *, shards_a: int = 2, shards_b: int = 1) -> Iterator[tuple[RunningSupervisor, RunningSupervisor]]:
    """Hosts A and B on one store, both reaped (their whole process groups) on the way out."""
    with RunningSupervisor(store_url, shards=shards_a, args=TIMING) as host_a, RunningSupervisor(store_url, shards=shards_b, args=TIMING) as host_b:
        yield host_a, host_b


def engines_of(host: RunningSupervisor) -> set[str]:
    """The engine ids of ``host``'s shards, from its own front door."""
    with Client(host.endpoint, timeout=10) as client:
        return {shard["engine_id"] for shard in client.stats()["shards"] if shard.get("engine_id")}


class InThread:
    """``function()`` run in a thread now; ``outcome(timeout)`` is its value or raises its error."""

    def __init__(self, function: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(function,), daemon=True)
        self._thread.start()

    def _run(self, function: Callable[[], Any]) -> None:
        try:
            self._value = function()
        except BaseException as exc:  # handed to the test thread by outcome()
            self._error = exc

    def requesting(self, client: Client) -> bool:
        """Whether the thread has a request of ``client``'s out (its socket is busy)."""
        return any(channel.busy and channel.thread is self._thread for channel in client._channels)

    def outcome(self, timeout: float) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"still running after {timeout}s"
        if self._error is not None:
            raise self._error
        return self._value


async def sent_on_current_link(client: AsyncClient, count: int, timeout: float = 10.0) -> None:
    """Until ``count`` requests are out on the link the client uses now."""
    deadline = time.monotonic() + timeout
    while client._link is None or len(client._link.sent) < count:
        assert time.monotonic() < deadline, f"{count} requests not sent within {timeout}s"
        await asyncio.sleep(0.01)


def kill(host: RunningSupervisor) -> float:
    """``kill -9`` of ``host``'s whole process group (reaped); when it happened."""
    killed_at = time.monotonic()
    host.kill()
    return killed_at


# -- (a) failover --------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_a_client_given_both_hosts_carries_on_when_the_first_is_killed(store_url: str) -> None:
    with two_hosts(store_url) as (host_a, host_b), Client([host_a.endpoint, host_b.endpoint], timeout=3) as client:
        engines_a = engines_of(host_a)
        before = [client.start("three_steps", i, id=f"before-{i}") for i in range(10)]
        assert [handle.result(timeout=30) for handle in before] == [i + 3 for i in range(10)]
        assert client.endpoint == host_a.endpoint  # the first, for as long as it answers

        # In progress at the kill, every one started (so owned) by host A's shards.
        sleepers = [client.start("sleeper", 2.0, id=f"sleeper-{i}") for i in range(8)]
        order = client.start("order", "o-1", 250, id="order-1")
        wait_until(lambda: order.query("status") == "awaiting approval", 30, "the order waits for its approval")
        owners = {handle.id: handle.describe()["owner"] for handle in [*sleepers, order]}
        assert set(owners.values()) <= engines_a, owners
        in_flight = InThread(lambda: sleepers[0].result(timeout=90))  # a long poll held by host A
        wait_until(lambda: in_flight.requesting(client), 10, "the long poll is sent")

        killed_at = kill(host_a)
        assert client.ping() == "pong"
        failover = time.monotonic() - killed_at
        assert client.endpoint == host_b.endpoint
        assert failover < 3.0, f"failover took {failover:.2f}s"

        after = [client.start("three_steps", 100 + i, id=f"after-{i}") for i in range(10)]
        assert [handle.result(timeout=30) for handle in after] == [103 + i for i in range(10)]
        new_starts = time.monotonic() - killed_at

        assert [client.get_handle(f"before-{i}").result(timeout=10) for i in range(10)] == [i + 3 for i in range(10)]
        order.signal("approve", True)  # to a workflow the dead host owned: into its durable inbox
        assert order.result(timeout=60) == ORDER_RESULT
        assert [handle.result(timeout=60) for handle in sleepers] == ["woke"] * len(sleepers)
        takeover = time.monotonic() - killed_at
        assert in_flight.outcome(60) == "woke"
        assert order.describe()["status"] == "completed"
        log.info(
            "failover: first call answered %.3fs after the kill; 10 new starts done at %.2fs; "
            "the dead host's %d workflows all done at %.2fs",
            failover, new_starts, len(owners), takeover,
        )


@pytest.mark.timeout(150)
def test_an_async_client_given_both_hosts_carries_on_when_the_first_is_killed(store_url: str) -> None:
    with two_hosts(store_url, shards_a=1) as (host_a, host_b):

        async def run() -> dict[str, float]:
            async with AsyncClient([host_a.endpoint, host_b.endpoint], timeout=3) as client:
                before = await asyncio.gather(*(client.execute("three_steps", i, timeout=30) for i in range(10)))
                assert before == [i + 3 for i in range(10)]
                order = await client.start("order", "o-1", 250, id="order-async")
                sleepers = [await client.start("sleeper", 2.0, id=f"async-sleeper-{i}") for i in range(5)]
                held = [asyncio.ensure_future(handle.result(timeout=90)) for handle in sleepers]  # long polls held by A
                await sent_on_current_link(client, len(held))  # in flight at the kill
                killed_at = kill(host_a)
                assert await client.ping() == "pong"
                failover = time.monotonic() - killed_at
                assert client.endpoint == host_b.endpoint
                after = await asyncio.gather(*(client.execute("three_steps", 100 + i, timeout=30) for i in range(10)))
                assert after == [103 + i for i in range(10)]
                await order.signal("approve", True)
                assert await order.result(timeout=60) == ORDER_RESULT
                assert await asyncio.gather(*held) == ["woke"] * len(sleepers)
                return {"failover": failover, "takeover": time.monotonic() - killed_at}

        timings = asyncio.run(run())
        assert timings["failover"] < 3.0, timings
        log.info("async failover: first call answered %.3fs after the kill; everything done at %.2fs", timings["failover"], timings["takeover"])


@pytest.mark.timeout(150)
def test_a_client_given_both_hosts_fails_over_from_a_frozen_one_by_its_timeout(store_url: str) -> None:
    with two_hosts(store_url, shards_a=1) as (host_a, host_b), Client([host_a.endpoint, host_b.endpoint], timeout=2) as client:
        order = client.start("order", "o-1", 250, id="order-1")
        sleepers = [client.start("sleeper", 1.0, id=f"sleeper-{i}") for i in range(5)]
        wait_until(lambda: order.query("status") == "awaiting approval", 30, "the order waits for its approval")
        assert client.endpoint == host_a.endpoint
        assert host_a.process is not None
        os.killpg(host_a.process.pid, signal.SIGSTOP)  # frozen: its connections stay up, nothing answers
        frozen_at = time.monotonic()
        # It reaches A's socket and gets no answer: it may have landed there, and its request
        # id lets B drop it if so, so it is sent to B.
        order.signal("approve", True)
        assert client.endpoint == host_b.endpoint
        failover = time.monotonic() - frozen_at
        assert 1.5 < failover < 5.0, f"failover took {failover:.2f}s"
        assert [client.start("three_steps", i, id=f"after-{i}").result(timeout=30) for i in range(5)] == [i + 3 for i in range(5)]
        assert order.result(timeout=60) == ORDER_RESULT  # once B took it over: A's lease lapsed
        assert [handle.result(timeout=60) for handle in sleepers] == ["woke"] * len(sleepers)
        assert approvals(store_url, "order-1") == 1  # consumed once, and no repeat left waiting
        takeover = time.monotonic() - frozen_at
        log.info("frozen host: failover by timeout after %.2fs; its workflows done at %.2fs", failover, takeover)
    # The frozen host was killed (SIGKILL reaches a stopped process) and reaped by two_hosts.


def approvals(store_url: str, wid: str) -> int:
    """Signals ``approve`` that ``wid`` consumed, plus any still waiting in its inbox."""
    from weft_actors.store import open_store

    store = open_store(store_url, readonly=True)
    try:
        _, _, ops, inbox = store.load_for_replay(wid)
    finally:
        store.close()
    consumed = sum(1 for op in ops.values() if op.get("kind") == "signal" and op.get("name") == "approve")
    return consumed + sum(1 for _, message in inbox if message.get("name") == "approve")


# -- (b) the host that does not own the workflow ---------------------------------------------


@pytest.mark.timeout(120)
def test_a_host_answers_for_workflows_the_other_host_owns(store_url: str) -> None:
    with two_hosts(store_url, shards_a=1) as (host_a, host_b), Client(host_a.endpoint, timeout=10) as via_a, Client(host_b.endpoint, timeout=10) as via_b:
        engines_a = engines_of(host_a)
        via_a.start("order", "o-1", 250, id="order-1")
        on_b = via_b.get_handle("order-1")
        wait_until(lambda: on_b.query("status") == "awaiting approval", 30, "host B's query sees the order wait")
        described = on_b.describe()
        assert (described["type"], described["status"]) == ("order", "running")
        assert described["owner"] in engines_a  # host A owns it; B answered from the store
        with pytest.raises(TimeoutError):
            on_b.result(timeout=0.5)
        on_b.signal("approve", True)
        assert on_b.result(timeout=30) == ORDER_RESULT
        assert via_a.get_handle("order-1").result(timeout=5) == ORDER_RESULT

        via_a.start("cart", [], id="cart-1")  # updates through host B, applied by A's owner
        cart_on_b = via_b.get_handle("cart-1")
        wait_until(lambda: via_b.get_handle("cart-1").describe()["owner"] in engines_a, 10, "host A owns the cart")
        assert [cart_on_b.update("add", item, request_id=f"add-{item}") for item in ("tea", "jam")] == [1, 2]
        assert cart_on_b.update("add", "tea", request_id="add-tea") == 1  # the same request: the recorded answer
        assert cart_on_b.update("add", "bread") == 3
        assert cart_on_b.result(timeout=30) == ["tea", "jam", "bread"]

        via_a.start("sleeper", 3600.0, id="sleeper-1")
        via_b.get_handle("sleeper-1").terminate("enough")
        with pytest.raises(WorkflowTerminated):
            via_a.get_handle("sleeper-1").result(timeout=10)
        with pytest.raises(WorkflowNotFound):
            via_b.get_handle("no-such-workflow").describe()

        # A client given both, B first: everything through B, nothing failed over.
        with Client([host_b.endpoint, host_a.endpoint], timeout=10) as both:
            handle = both.start("order", "o-1", 250, id="order-2")
            assert via_a.get_handle("order-2").describe()["owner"] not in engines_a  # B took this start
            via_a.get_handle("order-2").signal("approve", True)
            assert handle.result(timeout=30) == ORDER_RESULT and both.endpoint == host_b.endpoint


# -- (c) one endpoint ----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_client_given_one_host_reports_its_death_clearly(store_url: str) -> None:
    with RunningSupervisor(store_url, shards=1, args=TIMING) as host, Client(host.endpoint, timeout=2) as client:
        handle = client.start("sleeper", 3600.0, id="sleeper-1")
        in_flight = InThread(lambda: handle.result(timeout=3))  # held by the server: budget 2 + 3 s
        wait_until(lambda: in_flight.requesting(client), 10, "the long poll is sent")
        killed_at = kill(host)
        with pytest.raises(ServerUnavailable, match="no reply within") as caught:
            client.ping()
        assert not isinstance(caught.value, OutcomeUnknown)
        assert time.monotonic() - killed_at < 4.0
        with pytest.raises(ServerUnavailable):
            in_flight.outcome(10)
        assert time.monotonic() - killed_at < 8.0
        with pytest.raises(ServerUnavailable):
            client.get_handle("sleeper-1").describe()
