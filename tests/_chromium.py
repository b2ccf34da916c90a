"""Headless Chromium for the console's browser tests: ``--dump-dom``/``--screenshot`` runs,
and a browser driven over the DevTools protocol with a minimal stdlib websocket client.

Every browser runs in a session of its own with its own profile directory, and is killed with
its whole process group (renderers, GPU and zygote processes included) and reaped.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["find_chromium", "dump_dom", "screenshot", "DevTools"]

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions", "--mute-audio")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    chromium = find_chromium()
    assert chromium is not None
    with tempfile.TemporaryDirectory(prefix="weft-chromium-") as profile:
        process = subprocess.Popen(
            [chromium, *_FLAGS, f"--user-data-dir={profile}", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=timeout)
        finally:
            _kill_group(process)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _kill_group(process: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.communicate(timeout=10)
    except (ValueError, OSError):  # streams already closed
        process.wait(10)


def dump_dom(url: str, timeout: float = 60.0) -> str:
    """The DOM of ``url`` once loaded (scripts run), as Chromium serialises it."""
    done = _run(["--dump-dom", url], timeout)
    assert done.returncode == 0 and done.stdout, done.stderr[-2000:]
    return done.stdout


def screenshot(url: str, path: Path, timeout: float = 60.0) -> None:
    done = _run([f"--screenshot={path}", "--window-size=1280,900", "--hide-scrollbars", url], timeout)
    assert done.returncode == 0 and path.exists(), done.stderr[-2000:]


class _WebSocket:
    """Just enough RFC 6455 for the DevTools protocol: text frames, masked from the client."""

    def __init__(self, url: str, timeout: float) -> None:
        rest = url.removeprefix("ws://")
        address, _, path = rest.partition("/")
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /{path} HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the DevTools socket closed during the handshake")
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head[:200]
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytes([0x81])
        size = len(payload)
        if size < 126:
            header += bytes([0x80 | size])
        elif size < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", size)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", size)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the DevTools socket closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            size = second & 0x7F
            if size == 126:
                (size,) = struct.unpack(">H", self._read(2))
            elif size == 127:
                (size,) = struct.unpack(">Q", self._read(8))
            payload = self._read(size)
            if first & 0x0F in (0x1, 0x0):
                message += payload
                if first & 0x80:
                    return message.decode()

    def close(self) -> None:
        self.sock.close()


class DevTools:
    """A headless Chromium with one page, driven over the DevTools protocol; a context manager."""

    def __init__(self, timeout: float = 30.0, flags: tuple[str, ...] = ()) -> None:
        """``flags``: more Chromium switches (say, ``--host-resolver-rules=...``)."""
        chromium = find_chromium()
        assert chromium is not None
        self.timeout = timeout
        self.profile = tempfile.TemporaryDirectory(prefix="weft-chromium-")
        self.process = subprocess.Popen(
            [chromium, *_FLAGS, *flags, f"--user-data-dir={self.profile.name}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )
        self.ws: _WebSocket | None = None
        self.next_id = 0

    def __enter__(self) -> DevTools:
        try:
            port_file = Path(self.profile.name) / "DevToolsActivePort"
            deadline = time.monotonic() + self.timeout
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise AssertionError("Chromium did not open its DevTools port")
                time.sleep(0.05)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=self.timeout) as reply:
                pages = [target for target in json.load(reply) if target["type"] == "page"]
            self.ws = _WebSocket(pages[0]["webSocketDebuggerUrl"], self.timeout)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
        _kill_group(self.process)
        self.profile.cleanup()

    def call(self, method: str, **params: Any) -> Any:
        """Send one command and return its result (events in between are skipped)."""
        assert self.ws is not None
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.receive())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15.0) -> Any:
        """The truthy value of ``expression``, evaluated until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except AssertionError:  # mid-navigation: the context went away
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{expression!r} not true within {timeout}s")
            time.sleep(0.05)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")
