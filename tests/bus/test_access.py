"""Who may do what at the front door, with real CURVE keys on loopback TCP: full-access and
read-only key sets, revocation on a live connection, REQ sockets, the client's refusal of a
request above the wire ceiling, and the refusal of a non-loopback bind without CURVE."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from _processes import free_port
from weft_actors import Client
from weft_actors.bus import FrontDoor, KeyRing, shard_identity
from weft_actors.bus._calls import MAX_REQUEST_BYTES
from weft_actors.bus._frames import decode_batch, encode_batch
from weft_actors.bus._protocol import decode_reply, encode_reply, encode_request
from weft_actors.bus._routing import RoutingTable
from weft_actors.errors import PayloadTooLarge, PermissionDenied, ServerUnavailable
from weft_actors.supervisor._curve import check_bind, is_loopback

pytestmark = pytest.mark.timeout(30)


class Keys:
    def __init__(self, root) -> None:
        self.root = root
        self.full = root / "full"
        self.readonly = root / "readonly"
        for directory in (root / "certs", self.full, self.readonly):
            directory.mkdir()
        self.server_public, self.server_secret = zmq.auth.create_certificates(str(root / "certs"), "server")
        self.secrets = {}
        for name, directory in (("admin", self.full), ("viewer", self.readonly), ("stranger", None)):
            public, secret = zmq.auth.create_certificates(str(root / "certs"), name)
            if directory is not None:
                os.replace(public, directory / f"{name}.key")
            self.secrets[name] = secret

    def client(self, endpoint: str, name: str, timeout: float = 5.0) -> Client:
        return Client(endpoint, timeout=timeout, curve_server_key=self.server_public, curve_secret_key=self.secrets[name])


@pytest.fixture()
def curve_door(tmp_path):
    keys = Keys(tmp_path)
    context = zmq.Context()
    ring = KeyRing(str(keys.full), str(keys.readonly))
    authenticator = ThreadAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve_callback(domain="*", credentials_provider=ring)
    public, secret = zmq.auth.load_certificate(keys.server_secret)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    routing = RoutingTable(lambda wid: None, by_owner=False)  # no shard: routed calls get server_unavailable
    front = FrontDoor(context, endpoint, routing, lambda: {"ok": 1}, curve_secret_key=secret, curve_public_key=public, keys=ring, ready_timeout=0.2)
    front.start()
    try:
        yield keys, ring, endpoint
    finally:
        front.stop()
        authenticator.stop()
        context.destroy(linger=0)


def _admitted(call) -> bool:
    """True when the call got past the permission check (it then finds no shard)."""
    try:
        call()
    except PermissionDenied:
        return False
    except ServerUnavailable as exc:
        assert "no shard" in str(exc)
    return True


def test_a_read_only_key_may_read_but_not_change_anything(curve_door):
    keys, _, endpoint = curve_door
    with keys.client(endpoint, "viewer") as viewer, keys.client(endpoint, "admin") as admin:
        assert viewer.ping() == "pong" and viewer.stats() == {"ok": 1}
        handle = viewer.get_handle("w")
        assert _admitted(handle.describe)
        assert _admitted(lambda: viewer.list())
        for change in (handle.cancel, handle.terminate, lambda: handle.signal("go", 1), lambda: viewer.start("echo", 1)):
            with pytest.raises(PermissionDenied, match="read-only") as caught:
                change()
            assert caught.value.code == "permission_denied"
        assert _admitted(admin.get_handle("w").cancel)


def test_a_removed_key_loses_access_on_its_open_connection_and_cannot_connect_again(curve_door):
    keys, ring, endpoint = curve_door
    with keys.client(endpoint, "admin") as admin:
        assert admin.ping() == "pong"
        os.unlink(keys.full / "admin.key")
        ring.reload()  # what the supervisor's SIGHUP does
        with pytest.raises(PermissionDenied, match="no longer authorised"):
            admin.ping()
        with pytest.raises(PermissionDenied):
            admin.get_handle("w").cancel()
    with keys.client(endpoint, "admin", timeout=1.0) as again:
        with pytest.raises(ServerUnavailable):  # the handshake is refused
            again.ping()


def test_a_removed_key_is_noticed_without_a_signal(curve_door):
    keys, _, endpoint = curve_door
    with keys.client(endpoint, "viewer") as viewer:
        assert viewer.ping() == "pong"
        os.unlink(keys.readonly / "viewer.key")
        deadline = time.monotonic() + 5
        while True:  # the front door polls the directories about once a second
            try:
                viewer.ping()
            except PermissionDenied:
                break
            assert time.monotonic() < deadline, "revocation not noticed within 5 s"
            time.sleep(0.1)


def test_a_key_added_later_is_admitted(curve_door):
    keys, _, endpoint = curve_door
    public, _ = zmq.auth.load_certificate(keys.secrets["stranger"])
    with open(keys.readonly / "stranger.key", "w") as file:
        file.write(f'curve\n    public-key = "{public.decode()}"\n')
    deadline = time.monotonic() + 5
    while True:
        with keys.client(endpoint, "stranger", timeout=0.5) as stranger:
            try:
                assert stranger.ping() == "pong"
                break
            except ServerUnavailable:
                assert time.monotonic() < deadline
        time.sleep(0.1)


# -- REQ sockets ------------------------------------------------------------------------------


@pytest.fixture()
def plain_door(tmp_path):
    context = zmq.Context()
    routing = RoutingTable(lambda wid: None, by_owner=False)
    front = FrontDoor(context, f"ipc://{tmp_path}/front", routing, lambda: {}, backend_bind=f"ipc://{tmp_path}/back", ready_timeout=0.2)
    front.start()
    try:
        yield context, front, routing
    finally:
        front.stop()
        context.destroy(linger=0)


def _req(context: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    return sock


def test_a_req_socket_gets_its_replies(plain_door):
    context, front, routing = plain_door
    req = _req(context, front.endpoint)
    req.send(encode_request("1", "ping"))
    assert decode_reply(req.recv())["ok"] == "pong"
    req.send(encode_request("2", "describe", wid="w"))  # no shard: the front door's own error
    assert decode_reply(req.recv())["error"]["code"] == "server_unavailable"
    req.send(b"\x00garbage")
    assert decode_reply(req.recv())["error"]["code"] == "invalid_request"

    shard = context.socket(zmq.DEALER)  # and through a shard and back
    shard.setsockopt(zmq.IDENTITY, shard_identity(0))
    shard.setsockopt(zmq.LINGER, 0)
    shard.setsockopt(zmq.RCVTIMEO, 5000)
    shard.connect(front.backend_endpoint)
    routing.set_live(0, "a" * 32)
    time.sleep(0.2)  # the shard's connection is up before the first batch
    req.send(encode_request("3", "describe", wid="w"))
    (batch,) = shard.recv_multipart()
    client, request = decode_batch(batch)
    shard.send(encode_batch([client, encode_reply("3", "described"), "3", None]))
    assert decode_reply(req.recv())["ok"] == "described"


# -- the wire ceiling -----------------------------------------------------------------------


def test_the_client_refuses_a_request_above_the_wire_ceiling_at_once(plain_door):
    _, front, _ = plain_door
    with Client(front.endpoint, timeout=30) as client:
        started = time.monotonic()
        with pytest.raises(PayloadTooLarge) as caught:
            client.get_handle("w").signal("big", b"x" * (MAX_REQUEST_BYTES + 1))
        assert time.monotonic() - started < 10  # not the 30 s timeout
        assert caught.value.limit == MAX_REQUEST_BYTES
        assert client.ping() == "pong"


# -- binding ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint, loopback",
    [
        ("tcp://127.0.0.1:5555", True),
        ("tcp://localhost:5555", True),
        ("tcp://[::1]:5555", True),
        ("ipc:///tmp/weft", True),
        ("tcp://0.0.0.0:5555", False),
        ("tcp://*:5555", False),
        ("tcp://eth0:5555", False),
        ("tcp://10.1.2.3:5555", False),
    ],
)
def test_which_endpoints_count_as_loopback(endpoint, loopback):
    assert is_loopback(endpoint) is loopback


def test_a_non_loopback_bind_without_curve_is_refused_unless_insecure(caplog):
    with pytest.raises(Exception, match="--insecure-bind"):
        check_bind("tcp://0.0.0.0:5555", curve=False, insecure=False)
    check_bind("tcp://0.0.0.0:5555", curve=True, insecure=False)
    check_bind("tcp://0.0.0.0:5555", curve=False, insecure=True)
    assert "without CURVE" in caplog.text


def test_the_supervisor_refuses_a_non_loopback_bind_without_curve(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "weft_actors.supervisor", "--shards", "1", "--data", str(tmp_path / "data"), "--bind", f"tcp://0.0.0.0:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "refusing to bind" in result.stderr and "--insecure-bind" in result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was opened


def test_an_admitted_key_has_full_access_through_reloads(tmp_path):
    full, readonly = tmp_path / "full", tmp_path / "readonly"
    full.mkdir(), readonly.mkdir()
    keys = KeyRing(str(full), str(readonly))
    public, _ = zmq.curve_keypair()
    assert keys.denied(public, "cancel") is not None
    keys.admit(public)
    assert keys.callback("*", public) and keys.denied(public, "cancel") is None
    keys.reload()  # the directories do not hold it: it stays admitted
    assert keys.denied(public, "terminate") is None and list(full.iterdir()) == []
