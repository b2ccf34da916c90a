"""A part bigger than twice the largest legal request is dropped by libzmq as its size header
arrives (the client socket's ``MAXMSGSIZE``, ``part_cap``), before anything of it is held: a
message of 30 parts of 50 MB grows the supervisor by less than twice the payload limit, and the
front door keeps serving, the sender too once it has reconnected. Measured on a real
supervisor process by its resident set size."""

from __future__ import annotations

import threading
import time

import msgpack
import pytest
import zmq

from _processes import RunningSupervisor
from weft_actors import Client
from weft_actors.bus import decode_reply, encode_request

PAYLOAD_LIMIT = 4 << 20


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _ask(sock: zmq.Socket, frame: bytes, timeout: float = 20.0) -> dict:
    sock.send(frame)
    assert sock.poll(int(timeout * 1000)), "no reply"
    return decode_reply(sock.recv())


@pytest.mark.timeout(90)
def test_a_message_of_huge_parts_is_dropped_before_it_is_assembled(tmp_path):
    args = ("--payload-limit", str(PAYLOAD_LIMIT), "--max-intake-mb", "96")
    with RunningSupervisor(tmp_path / "data", shards=1, args=args) as sup, Client(sup.endpoint, timeout=20) as client:
        assert client.ping() == "pong"
        pid = sup.process.pid
        before = _rss(pid)
        peak = [before]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                peak[0] = max(peak[0], _rss(pid))
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        context = zmq.Context()
        hostile = context.socket(zmq.DEALER)
        hostile.setsockopt(zmq.LINGER, 0)
        hostile.connect(sup.endpoint)
        try:
            part = zmq.Frame(b"p" * (50 * 1000 * 1000))
            hostile.send_multipart([encode_request(1, "ping")] + [part] * 30, copy=False)
            # Queued behind it: answered once the hostile message is gone and the socket has
            # reconnected (libzmq discards the rest of a message it could not send whole).
            assert _ask(hostile, encode_request(2, "ping"))["ok"] == "pong"
            assert client.ping() == "pong"  # the other client was never touched
            time.sleep(0.2)  # a few more samples after the drop
            sampling.set()
            sampler.join(5)
            grown = peak[0] - before
            assert grown < 2 * PAYLOAD_LIMIT, f"the supervisor grew {grown >> 20} MiB for a message of 30 x 50 MB parts"
            # A request over the payload limit, but within the cap, still gets its reply.
            big = msgpack.packb({"v": 1, "id": "e", "op": "signal", "wid": "w", "name": "n", "payload": b"x" * (PAYLOAD_LIMIT + 100_000)}, use_bin_type=True)
            assert _ask(hostile, big)["error"]["code"] == "payload_too_large"
            assert _ask(hostile, encode_request(3, "ping"))["ok"] == "pong"
        finally:
            sampling.set()
            hostile.close(0)
            context.term()
