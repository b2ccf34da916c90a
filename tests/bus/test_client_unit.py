"""``Client`` (sync) against a fake server on real loopback sockets, plus CURVE."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_client_fakes import NO_REPLY, FakeServer, canned, not_found, sleep_then  # noqa: E402

from weft_actors import workflow  # noqa: E402
from weft_actors.bus._client import Client, ClientHandle  # noqa: E402
from weft_actors.bus._curve import load_key, resolve_curve  # noqa: E402
from weft_actors.codec import decode, decode_args, encode  # noqa: E402
from weft_actors.errors import (  # noqa: E402
    InvalidRequest,
    SerializationError,
    ServerUnavailable,
    UnknownWorkflowType,
    WorkflowFailed,
    WorkflowNotFound,
)


@workflow(name="order-flow")
async def order(ctx: Any, order_id: str) -> str:
    return order_id


@pytest.fixture
def server() -> Any:
    with FakeServer() as fake:
        yield fake


@pytest.fixture
def client(server: FakeServer) -> Any:
    with Client(server.endpoint, timeout=5) as c:
        yield c


def test_start_sends_encoded_args_and_options(client: Client, server: FakeServer) -> None:
    handle = client.start(order, "o-1", (1, 2), id="order-o-1", if_exists="return", start_delay=2, execution_timeout=60.5, memo={"k": b"v"})
    assert isinstance(handle, ClientHandle)
    assert (handle.id, handle.run_id) == ("order-o-1", "run-1")
    request = server.requests[-1]
    assert request["op"] == "start" and request["workflow"] == "order-flow"
    assert decode_args(request["args"]) == ("o-1", (1, 2))
    assert (request["wid"], request["if_exists"], request["start_delay"], request["execution_timeout"]) == ("order-o-1", "return", 2.0, 60.5)
    assert decode(request["memo"]) == {"k": b"v"}
    assert "start_at" not in request and isinstance(request["id"], str)


def test_signal_with_start_and_every_handle_call(client: Client, server: FakeServer) -> None:
    handle = client.signal_with_start("order", "o-2", signal="approve", payload={"by": "me"}, id="w-2")
    assert handle.id == "w-2"
    assert decode(server.requests[-1]["payload"]) == {"by": "me"} and server.requests[-1]["signal"] == "approve"
    h = client.get_handle("w-2")
    assert h.signal("approve", [1, 2]) is None
    assert decode(server.requests[-1]["payload"]) == [1, 2]
    assert h.query("status", 1, "x") == {"name": "status", "args": (1, "x")}
    first = h.update("add", 5)
    assert first["args"] == (5,) and len(first["request_id"]) == 32
    assert h.update("add", 5, request_id="r-1")["request_id"] == "r-1"
    assert h.result(timeout=5) == ("done", "w-2")
    assert h.cancel() is None
    assert h.terminate("enough") is None and server.requests[-1]["reason"] == "enough"
    described = h.describe()
    assert described["id"] == "w-2" and described["tags"] == {"a"}
    assert server.ops() == ["signal_with_start", "signal", "query", "update", "update", "result", "cancel", "terminate", "describe"]


def test_list_stats_ping(client: Client, server: FakeServer) -> None:
    page = client.list(status="completed", type="order", limit=2, cursor="c0")
    assert [item["id"] for item in page["items"]] == ["wf-0", "wf-1"] and page["cursor"] == "next-page"
    assert {k: server.requests[-1][k] for k in ("status", "type", "limit", "cursor")} == {"status": "completed", "type": "order", "limit": 2, "cursor": "c0"}
    client.list()
    assert "status" not in server.requests[-1] and server.requests[-1]["limit"] == 100
    assert client.stats()["supervisor"] == {"shards": 2}
    assert client.ping() == "pong"


def test_error_replies_raise_the_same_class() -> None:
    with FakeServer(not_found) as fake, Client(fake.endpoint, timeout=5) as c:
        with pytest.raises(WorkflowNotFound) as info:
            c.get_handle("nope").query("status")
        assert info.value.code == "workflow_not_found"
        assert info.value.message == "workflow 'nope' not found" and info.value.workflow_id == "nope"
        with pytest.raises(WorkflowNotFound):
            c.get_handle("nope").result(timeout=1)
        assert c.ping() == "pong"


def test_result_long_polls_until_completed() -> None:
    replies = iter([{"status": "running"}] * 3 + [{"status": "completed", "result": encode({"total": 3})}])

    def handler(request: dict[str, Any]) -> Any:
        return next(replies) if request["op"] == "result" else canned(request)

    with FakeServer(handler) as fake, Client(fake.endpoint, timeout=5) as c:
        assert c.get_handle("w").result() == {"total": 3}
    waits = [r["wait"] for r in fake.requests]
    assert len(waits) == 4 and all(w == 30.0 for w in waits)


def test_result_timeout_and_failed_workflow() -> None:
    def handler(request: dict[str, Any]) -> Any:
        if request["wid"] == "bad":
            raise WorkflowFailed("boom", type="ValueError", traceback="tb")
        return {"status": "running"}

    with FakeServer(handler) as fake, Client(fake.endpoint, timeout=5) as c:
        with pytest.raises(TimeoutError):
            c.get_handle("slow").result(timeout=0.2)
        assert all(0 <= r["wait"] <= 0.2 for r in fake.requests)
        with pytest.raises(WorkflowFailed) as info:
            c.get_handle("bad").result(timeout=1)
        assert info.value.type == "ValueError" and str(info.value) == "boom"


def test_no_reply_raises_server_unavailable_then_recovers() -> None:
    def handler(request: dict[str, Any]) -> Any:
        return NO_REPLY if request["op"] == "query" else canned(request)

    with FakeServer(handler) as fake, Client(fake.endpoint, timeout=0.3) as c:
        with pytest.raises(ServerUnavailable) as info:
            c.get_handle("w").query("hang")
        assert info.value.code == "server_unavailable" and info.value.op == "query"
        assert c.ping() == "pong"


def test_late_reply_is_not_taken_for_the_next_one() -> None:
    slow = sleep_then(0.4)

    def handler(request: dict[str, Any]) -> Any:
        return slow(request) if request["op"] == "query" else canned(request)

    with FakeServer(handler) as fake, Client(fake.endpoint, timeout=0.25) as c:
        with pytest.raises(ServerUnavailable):
            c.get_handle("w").query("late", 1)
        deadline = time.monotonic() + 5
        while fake.unroutable == 0:  # the late reply went to the discarded socket
            assert time.monotonic() < deadline, "the fake server never sent the late reply"
            time.sleep(0.01)
        assert c.get_handle("w").describe()["id"] == "w"
        assert c.stats()["supervisor"] == {"shards": 2}


def test_serialization_error_is_raised_before_sending(client: Client, server: FakeServer) -> None:
    with pytest.raises(SerializationError):
        client.start("order", object())
    with pytest.raises(SerializationError):
        client.get_handle("w").signal("s", threading.Lock())
    with pytest.raises(UnknownWorkflowType):
        client.start(len)
    with pytest.raises(InvalidRequest):
        client.start("order", if_exists="maybe")
    assert server.requests == []


def test_threads_share_one_client(client: Client, server: FakeServer) -> None:
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(50):
                assert client.get_handle(f"w{n}").query("q", n, i) == {"name": "q", "args": (n, i)}
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert len(server.requests) == 500


def test_closed_client_refuses_calls(server: FakeServer) -> None:
    c = Client(server.endpoint, timeout=1)
    assert c.ping() == "pong"
    c.close()
    c.close()
    with pytest.raises(ServerUnavailable):
        c.ping()
    with pytest.raises(TypeError):
        ClientHandle(c, "x")


def test_close_fails_a_call_in_flight_on_another_thread() -> None:
    outcome: list[BaseException] = []
    with FakeServer(lambda request: NO_REPLY) as fake:
        c = Client(fake.endpoint, timeout=30)

        def waiter() -> None:
            try:
                c.ping()
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=waiter)
        thread.start()
        deadline = time.monotonic() + 5
        while not fake.requests:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        c.close()
        thread.join(5)
        assert not thread.is_alive() and time.monotonic() - started < 2
    assert len(outcome) == 1 and isinstance(outcome[0], ServerUnavailable)


def test_bad_endpoint_is_a_value_error() -> None:
    with Client("no-transport", timeout=1) as c:
        with pytest.raises(ValueError):
            c.ping()


# -- CURVE ------------------------------------------------------------------------------


@pytest.fixture
def curve_dirs(tmp_path: Path) -> dict[str, Path]:
    if not zmq.has("curve"):
        pytest.skip("libzmq without CURVE")
    dirs = {name: tmp_path / name for name in ("server", "authorized", "other")}
    for path in dirs.values():
        path.mkdir()
    zmq.auth.create_certificates(dirs["server"], "server")
    zmq.auth.create_certificates(dirs["authorized"], "client")
    zmq.auth.create_certificates(dirs["other"], "intruder")
    return dirs


def test_curve_authorized_client_gets_through_and_others_do_not(curve_dirs: dict[str, Path]) -> None:
    context = zmq.Context()
    auth = ThreadAuthenticator(context)
    auth.start()
    try:
        auth.configure_curve(domain="*", location=str(curve_dirs["authorized"]))
        _, server_secret = zmq.auth.load_certificate(curve_dirs["server"] / "server.key_secret")
        server_public_file = curve_dirs["server"] / "server.key"
        with FakeServer(curve_secret_key=server_secret, context=context) as fake:
            with Client(fake.endpoint, timeout=3, curve_server_key=str(server_public_file),
                        curve_secret_key=curve_dirs["authorized"] / "client.key_secret") as good:
                assert good.ping() == "pong"
            with Client(fake.endpoint, timeout=0.4, curve_server_key=str(server_public_file),
                        curve_secret_key=str(curve_dirs["other"] / "intruder.key_secret")) as bad:
                with pytest.raises(ServerUnavailable):
                    bad.ping()
            with Client(fake.endpoint, timeout=0.4, curve_server_key=load_key(server_public_file)) as ephemeral:
                with pytest.raises(ServerUnavailable):
                    ephemeral.ping()
            assert fake.ops() == ["ping"]
    finally:
        auth.stop()
        context.term()


def test_curve_key_forms(curve_dirs: dict[str, Path]) -> None:
    public, secret = zmq.auth.load_certificate(curve_dirs["authorized"] / "client.key_secret")
    assert load_key(public) == public and load_key(public.decode()) == public
    assert load_key(curve_dirs["authorized"] / "client.key") == public
    assert load_key(str(curve_dirs["authorized"] / "client.key_secret"), secret=True) == secret
    with pytest.raises(ValueError):
        load_key(curve_dirs["authorized"] / "client.key", secret=True)
    with pytest.raises(ValueError):
        load_key("not a key")
    keys = resolve_curve(public, secret_key=secret)
    assert keys is not None and keys.public == public and keys.secret == secret
    ephemeral = resolve_curve(public)
    assert ephemeral is not None and ephemeral.public != public and len(ephemeral.secret) == 40
    assert resolve_curve(None) is None
    with pytest.raises(ValueError):
        resolve_curve(None, secret_key=secret)
    with pytest.raises(ValueError):
        resolve_curve(public, public_key=public)


@pytest.mark.parametrize("wid", ["", None, 7, "a\x00b", "x" * 300])
def test_every_client_call_refuses_a_bad_workflow_id_before_sending(wid):
    from weft_actors.bus import _calls
    from weft_actors.errors import InvalidRequest

    builders = [
        lambda: _calls.signal_call(wid, "go", 1),
        lambda: _calls.query_call(wid, "q", ()),
        lambda: _calls.update_call(wid, "u", ()),
        lambda: _calls.result_call(wid, 1.0),
        lambda: _calls.cancel_call(wid),
        lambda: _calls.terminate_call(wid),
        lambda: _calls.describe_call(wid),
    ]
    if wid is not None:  # no id at start means "make one"
        builders.append(lambda: _calls.start_call("w", (), id=wid))
    for build in builders:
        with pytest.raises(InvalidRequest):
            build()


@pytest.mark.parametrize("option", ["start_delay", "start_at", "execution_timeout"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e300])
def test_client_start_refuses_unusable_times_before_sending(option, value):
    from weft_actors.bus import _calls
    from weft_actors.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        _calls.start_call("w", (), **{option: value})
