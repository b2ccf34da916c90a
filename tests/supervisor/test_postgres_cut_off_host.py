"""A host cut off from its PostgreSQL server answers within seconds, commits nothing, and
rejoins when the network returns: a real supervisor and shards whose every connection goes
through a proxy that stops forwarding (``_pausable_proxy``; no TCP timer notices such a cut,
so only the client-side bound on each round trip ends the waits). Before, a start sent
during the cut hung until the network returned (its shard's reads and commits blocked for
as long as the connection lasted: ~15 minutes of retransmission on a real network)."""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from _pausable_proxy import PausableProxy
from _processes import RunningSupervisor, pid_alive, wait_until
from weft_actors import Client
from weft_actors.errors import StorageError

APP = "supervisor_app"
TIMING = ("--heartbeat", "0.5", "--ttl", "1.5", "--restart-limit", "3", "--restart-window", "30")


def _start_when_served(client: Client, wid: str) -> list[int]:
    """Start ``wid`` as a client retrying a refused start would (a refused start committed
    nothing), for 20 s at most; its result."""
    deadline = time.monotonic() + 20.0
    while True:
        try:
            return client.start("slow_steps", 2, 0.0, id=wid).result(timeout=30)
        except StorageError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.timeout(150)
def test_a_cut_off_host_answers_storage_error_within_seconds_and_rejoins_when_the_network_returns(schema_url):
    parts = urlsplit(schema_url)
    with PausableProxy(parts.port or 5432) as proxy:
        url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))
        with RunningSupervisor(url, shards=2, app=APP, args=TIMING) as sup, Client(sup.endpoint, timeout=40) as client:
            pids = sup.shard_pids
            assert client.start("slow_steps", 1, 0.0, id="before").result(timeout=15) == [0]
            proxy.pause()
            began = time.monotonic()
            with pytest.raises(StorageError) as refused:
                client.start("slow_steps", 1, 0.0, id="during").result(timeout=40)
            took = time.monotonic() - began
            assert took < 25.0, f"a start took {took:.1f} s to be refused while cut off"
            assert refused.value.reason == "unreachable", refused.value
            proxy.resume()
            resumed = time.monotonic()
            wait_until(lambda: sum(shard["alive"] for shard in client.stats()["shards"]) == 2, 30, "both shards serving")
            assert _start_when_served(client, "after") == [0, 1]  # refused (StorageError) until it rejoins
            assert time.monotonic() - resumed < 15.0
            text = sup.log_text()
            assert "is hung" not in text and "restart intensity exceeded" not in text, text[-3000:]
            assert sup.process is not None and sup.process.poll() is None
            assert all(pid_alive(pid) for pid in pids), text[-3000:]
