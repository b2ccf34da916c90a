"""Failover between several endpoints, ``Client`` and ``AsyncClient``, against fake servers.

Each fake is a real ROUTER on loopback (``test_client_fakes``); a dead supervisor is a port
nobody listens on (refused), a fake that never answers (silent), or a fake closed while a
request waits (a lost connection). What is checked is the policy: which requests go on to
the next endpoint, which raise ``OutcomeUnknown`` instead, and that an error answer is the
answer. The real supervisors on a shared store are ``tests/supervisor/test_client_failover.py``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_client_fakes import NO_REPLY, FakeServer, canned  # noqa: E402

from _processes import free_port, wait_until  # noqa: E402
from weft_actors.bus import _calls  # noqa: E402
from weft_actors.bus._async_client import AsyncClient  # noqa: E402
from weft_actors.bus._client import Client  # noqa: E402
from weft_actors.bus._frames import readable  # noqa: E402
from weft_actors.bus._protocol import decode_request, encode_envelope, encode_reply  # noqa: E402
from weft_actors.bus._sync_transport import ThreadTransport  # noqa: E402
from weft_actors.cli import _check_listening, _endpoint, main  # noqa: E402
from weft_actors.errors import OutcomeUnknown, ServerUnavailable, WorkflowNotFound  # noqa: E402

pytestmark = pytest.mark.timeout(30)


def refused() -> str:
    """An endpoint nothing listens on: connections to it are refused at once."""
    return f"tcp://127.0.0.1:{free_port()}"


def silent(request: dict[str, Any]) -> Any:
    return NO_REPLY


def unserved(request: dict[str, Any]) -> Any:
    raise ServerUnavailable("no shard became ready within 5s", op=request["op"])


def missing(request: dict[str, Any]) -> Any:
    raise WorkflowNotFound(f"workflow {request.get('wid')!r} not found", workflow_id=request.get("wid"))


# -- the endpoints -----------------------------------------------------------------------------


def test_endpoint_list_takes_one_several_or_a_comma_joined_string() -> None:
    assert _calls.endpoint_list("tcp://a:1") == ("tcp://a:1",)
    assert _calls.endpoint_list("tcp://a:1, tcp://b:2") == ("tcp://a:1", "tcp://b:2")
    assert _calls.endpoint_list(["tcp://a:1", "ipc:///tmp/b"]) == ("tcp://a:1", "ipc:///tmp/b")
    assert _calls.endpoint_list(("tcp://a:1",)) == ("tcp://a:1",)
    assert _calls.endpoint_list("ipc:///tmp/a,b") == ("ipc:///tmp/a,b",)  # a path with a comma stays whole
    for bad in ([], ["tcp://a:1", ""], [None]):
        with pytest.raises(ValueError):
            _calls.endpoint_list(bad)  # type: ignore[arg-type]


def test_the_cli_takes_several_endpoints_and_checks_that_one_listens() -> None:
    assert _endpoint("tcp://a:1,tcp://b:2") == "tcp://a:1,tcp://b:2"
    with pytest.raises(Exception, match="names no transport"):
        _endpoint("a:1,tcp://b:2")
    with pytest.raises(Exception, match="each of several endpoints with its transport"):
        _endpoint("tcp://a:1,b:2")
    with FakeServer() as live:
        _check_listening(f"{refused()},{live.endpoint}", 2.0)
    first, second = refused(), refused()
    with pytest.raises(ServerUnavailable, match="nothing is listening") as caught:
        _check_listening(f"{first},{second}", 2.0)
    assert first in str(caught.value) and second in str(caught.value)


def test_the_cli_fails_over_between_comma_separated_endpoints(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeServer() as live:
        assert main(["--endpoint", f"{refused()},{live.endpoint}", "signal", "w-1", "approve", "true"]) == 0
        assert live.ops() == ["signal"] and capsys.readouterr().out.strip() == "ok"
        monkeypatch.setenv("WEFT_ENDPOINT", f"{refused()},{live.endpoint}")
        assert main(["ping"]) == 0 and capsys.readouterr().out.strip() == "pong"
    assert main(["--endpoint", f"{refused()},{refused()}", "ping"]) == 1
    assert "nothing is listening at" in capsys.readouterr().err


def test_one_endpoint_sends_what_it_always_sent() -> None:
    """Byte for byte, and without the failover socket options."""
    context = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.linger = 0
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout=5) as client:
            assert client.endpoints == (client.endpoint,) and not client._failover
            answered = threading.Thread(target=lambda: client.get_handle("w-1").signal("go", 7, request_id="r-1"))
            answered.start()
            assert router.poll(5000)
            identity, frame = router.recv_multipart()
            expected = encode_envelope("1", "signal", _calls.signal_call("w-1", "go", 7, "r-1").fields)
            assert frame == expected
            router.send_multipart([identity, msgpack.packb({"v": 1, "id": "1", "ok": None})])
            answered.join(5)
            (channel,) = client._channels
            assert channel.watch is None and channel.socket.immediate == 0
    finally:
        router.close(0)


# -- Client ------------------------------------------------------------------------------------


def test_a_refused_endpoint_passes_any_request_on_at_once() -> None:
    """Nothing was sent, so even a cancel (not resendable) goes to the next supervisor."""
    with FakeServer() as second, Client([refused(), second.endpoint], timeout=5) as client:
        began = time.monotonic()
        client.get_handle("w-1").cancel()
        assert time.monotonic() - began < 2.0
        assert second.ops() == ["cancel"] and client.endpoint == second.endpoint
        client.start("order", "o-1")  # a start without an id, too: it never left
        assert second.ops() == ["cancel", "start"]


def test_a_silent_endpoint_resends_only_what_is_idempotent() -> None:
    with FakeServer(silent) as first, FakeServer() as second:
        for name, call, resent in (
            ("query", lambda c: c.get_handle("w-1").query("status"), True),
            ("describe", lambda c: c.get_handle("w-1").describe(), True),
            ("result", lambda c: c.get_handle("w-1").result(timeout=0.1), True),
            ("update", lambda c: c.get_handle("w-1").update("add", 1), True),
            ("start", lambda c: c.start("order", "o-1", id="w-1", if_exists="return"), True),
            ("start", lambda c: c.start("order", "o-1", id="w-1"), False),
            ("start", lambda c: c.start("order", "o-1"), False),
            ("signal", lambda c: c.get_handle("w-1").signal("approve"), True),
            ("cancel", lambda c: c.get_handle("w-1").cancel(), False),
            ("terminate", lambda c: c.get_handle("w-1").terminate(), False),
            ("signal_with_start", lambda c: c.signal_with_start("order", id="w-1", signal="go"), False),
        ):
            second.requests.clear()
            with Client([first.endpoint, second.endpoint], timeout=0.3) as client:
                if resent:
                    call(client)
                    assert second.ops() == [name], name
                else:
                    with pytest.raises(OutcomeUnknown, match="may or may not have been applied"):
                        call(client)
                    assert second.ops() == [], name
                assert client.endpoint == second.endpoint, name  # and later calls go there


def test_an_update_is_resent_with_its_request_id() -> None:
    with FakeServer(silent) as first, FakeServer() as second, Client([first.endpoint, second.endpoint], timeout=0.3) as client:
        answer = client.get_handle("w-1").update("add", "tea")
        assert first.requests[-1]["request_id"] == second.requests[-1]["request_id"] == answer["request_id"]


def test_a_signal_is_resent_with_its_request_id() -> None:
    """The store drops the repeat by that id: the signal arrives once whichever got it."""
    with FakeServer(silent) as first, FakeServer() as second, Client([first.endpoint, second.endpoint], timeout=0.3) as client:
        client.get_handle("w-1").signal("approve", True)
        sent, resent = first.requests[-1], second.requests[-1]
        assert sent["op"] == resent["op"] == "signal"
        assert isinstance(sent["request_id"], str) and sent["request_id"] == resent["request_id"]


def test_a_connection_lost_under_a_request_fails_over_before_the_timeout() -> None:
    first = FakeServer(silent).__enter__()
    try:
        with FakeServer() as second, Client([first.endpoint, second.endpoint], timeout=20) as client:
            threading.Timer(0.3, first.close).start()
            began = time.monotonic()
            assert client.get_handle("w-1").result() == ("done", "w-1")
            assert time.monotonic() - began < 5.0
            assert second.ops() == ["result"]
    finally:
        first.close()


def test_a_reply_read_only_after_its_connection_ended_is_still_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor answers a start and exits before the client's thread reads the answer (the
    thread is held until its socket's monitor has the connection's end queued): the answer
    was received all the same, so it is the start's, not ``OutcomeUnknown``."""
    context = zmq.Context()
    server = context.socket(zmq.ROUTER)
    server.rcvtimeo = 10_000
    endpoint = f"tcp://127.0.0.1:{server.bind_to_random_port('tcp://127.0.0.1')}"
    answered = threading.Event()

    def serve() -> None:
        try:
            for _ in range(2):  # a ping, then the start
                identity, frame = server.recv_multipart()
                request = decode_request(frame)
                server.send_multipart([identity, encode_reply(request["id"], canned(request))])
        finally:
            server.close(linger=5000)  # its last answer leaves, then the connection ends
            answered.set()

    original = ThreadTransport._await_reply
    held: list[bool] = []

    def hold_the_start(self: ThreadTransport, socket: zmq.Socket, watch: Any, *args: Any) -> Any:
        if held == [False]:  # the start's wait (the ping's was the first)
            assert answered.wait(10)
            wait_until(lambda: readable(watch.monitor), 10, "the connection's end seen")
        held.append(False)
        return original(self, socket, watch, *args)

    monkeypatch.setattr(ThreadTransport, "_await_reply", hold_the_start)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with Client([endpoint, refused()], timeout=5) as client:
            assert client.ping() == "pong"
            assert client.start("order", 1, id="w-1").id == "w-1"
    finally:
        thread.join(15)
        context.term()


def test_an_error_answer_is_the_answer() -> None:
    with FakeServer(missing) as first, FakeServer() as second, Client([first.endpoint, second.endpoint], timeout=5) as client:
        with pytest.raises(WorkflowNotFound):
            client.get_handle("w-1").describe()
        assert second.ops() == [] and client.endpoint == first.endpoint


def test_a_supervisor_with_no_shard_ready_passes_the_request_on() -> None:
    """It answered ``server_unavailable``: no shard took the request, so a signal goes on too."""
    with FakeServer(unserved) as first, FakeServer() as second, Client([first.endpoint, second.endpoint], timeout=5) as client:
        client.get_handle("w-1").signal("approve")
        assert first.ops() == ["signal"] and second.ops() == ["signal"]


def test_every_endpoint_down_is_one_clear_error() -> None:
    endpoints = [refused(), refused()]
    with Client(endpoints, timeout=5) as client:
        began = time.monotonic()
        with pytest.raises(ServerUnavailable, match="no supervisor answered") as caught:
            client.ping()
        assert time.monotonic() - began < 2.0
        assert not isinstance(caught.value, OutcomeUnknown)
        assert all(endpoint in str(caught.value) for endpoint in endpoints)


def test_the_client_stays_where_it_failed_over_to_and_comes_back_round() -> None:
    with FakeServer() as first, FakeServer() as second:
        with Client([first.endpoint, second.endpoint], timeout=0.3) as client:
            client.ping()
            first.handler = silent
            client.get_handle("w-1").query("status")
            client.get_handle("w-1").query("status")
            assert second.ops() == ["query", "query"]
            first.handler, second.handler = canned, silent
            client.get_handle("w-1").query("status")
            assert first.ops()[-1] == "query" and client.endpoint == first.endpoint


def test_other_threads_follow_the_failover() -> None:
    with FakeServer() as first, FakeServer() as second, Client([first.endpoint, second.endpoint], timeout=0.3) as client:
        other = threading.Thread(target=client.ping)
        other.start()
        other.join(5)
        first.handler = silent
        client.ping()  # this thread fails over
        first.handler = canned
        other = threading.Thread(target=lambda: client.get_handle("w-1").describe())
        other.start()
        other.join(5)
        assert second.ops() == ["ping", "describe"] and first.ops() == ["ping", "ping"]


# -- AsyncClient -------------------------------------------------------------------------------


def test_async_refused_endpoint_passes_a_signal_on() -> None:
    async def run() -> None:
        with FakeServer() as second:
            async with AsyncClient([refused(), second.endpoint], timeout=5) as client:
                await client.get_handle("w-1").signal("approve")
                assert second.ops() == ["signal"] and client.endpoint == second.endpoint

    asyncio.run(run())


def test_async_silent_endpoint_resends_reads_and_signals_and_not_starts() -> None:
    async def run() -> None:
        with FakeServer(silent) as first, FakeServer() as second:
            async with AsyncClient([first.endpoint, second.endpoint], timeout=0.3) as client:
                handle = client.get_handle("w-1")
                outcomes = await asyncio.gather(
                    handle.signal("approve"), handle.query("status"), handle.update("add", 1), client.start("order", id="w-2"),
                    return_exceptions=True,
                )
                assert outcomes[0] is None and isinstance(outcomes[3], OutcomeUnknown)
                assert outcomes[1] == {"name": "status", "args": ()} and outcomes[2]["args"] == (1,)
                assert sorted(second.ops()) == ["query", "signal", "update"]
                assert client.endpoint == second.endpoint and not client._retired

    asyncio.run(run())


def test_async_error_answer_is_the_answer() -> None:
    async def run() -> None:
        with FakeServer(missing) as first, FakeServer() as second:
            async with AsyncClient([first.endpoint, second.endpoint], timeout=5) as client:
                with pytest.raises(WorkflowNotFound):
                    await client.get_handle("w-1").result(timeout=1)
                assert second.ops() == [] and client.endpoint == first.endpoint

    asyncio.run(run())


def test_async_lost_connection_fails_what_was_in_flight_at_once() -> None:
    async def run() -> None:
        first = FakeServer(silent).__enter__()
        try:
            with FakeServer() as second:
                async with AsyncClient([first.endpoint, second.endpoint], timeout=20) as client:
                    handle = client.get_handle("w-1")
                    asyncio.get_running_loop().call_later(0.3, first.close)
                    began = time.monotonic()
                    outcomes = await asyncio.gather(handle.result(), handle.cancel(), handle.describe(), return_exceptions=True)
                    assert time.monotonic() - began < 5.0
                    assert outcomes[0] == ("done", "w-1") and isinstance(outcomes[1], OutcomeUnknown)
                    assert outcomes[2]["id"] == "w-1"
                    assert sorted(second.ops()) == ["describe", "result"]
        finally:
            first.close()

    asyncio.run(run())


def test_async_requests_in_flight_on_a_supervisor_given_up_on_still_get_its_answer() -> None:
    """A ping to the first times out and the client moves on; a ``result`` it was holding
    meanwhile is answered there later, on the link kept open for it, which then closes."""

    def slow_result(request: dict[str, Any]) -> Any:
        if request["op"] == "ping":
            return NO_REPLY
        time.sleep(0.8)
        return canned(request)

    async def run() -> None:
        with FakeServer(slow_result) as first, FakeServer() as second:
            async with AsyncClient([first.endpoint, second.endpoint], timeout=0.4) as client:
                pinged, result = await asyncio.gather(client.ping(), client.get_handle("w-1").result(timeout=3))
                assert pinged == "pong" and result == ("done", "w-1")
                assert first.ops() == ["ping", "result"] and second.ops() == ["ping"]
                assert not client._retired

    asyncio.run(run())


def test_async_every_endpoint_down_is_one_clear_error() -> None:
    async def run() -> None:
        async with AsyncClient([refused(), refused()], timeout=5) as client:
            with pytest.raises(ServerUnavailable, match="no supervisor answered"):
                await client.ping()

    asyncio.run(run())
