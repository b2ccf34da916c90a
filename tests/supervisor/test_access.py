"""The supervisor's access control end to end: read-only and full-access CURVE keys, a key
revoked by deleting its file and SIGHUP, and a non-loopback bind allowed only when asked."""

from __future__ import annotations

import os
import signal
import time

import pytest
import zmq.auth

from _processes import RunningSupervisor
from weft_actors import Client
from weft_actors.errors import PermissionDenied

pytestmark = pytest.mark.timeout(60)

APP = "supervisor_app"


def test_read_only_keys_read_full_keys_write_and_sighup_revokes(tmp_path):
    certs, full, readonly = tmp_path / "certs", tmp_path / "full", tmp_path / "readonly"
    for directory in (certs, full, readonly):
        directory.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(certs), "server")
    admin_public, admin_secret = zmq.auth.create_certificates(str(certs), "admin")
    viewer_public, viewer_secret = zmq.auth.create_certificates(str(certs), "viewer")
    os.replace(admin_public, full / "admin.key")
    os.replace(viewer_public, readonly / "viewer.key")
    args = ("--curve-secret-key", server_secret, "--curve-authorized-keys", str(full), "--curve-readonly-keys", str(readonly))
    with RunningSupervisor(tmp_path / "data", shards=1, app=APP, args=args) as sup:
        with Client(sup.endpoint, timeout=10, curve_server_key=server_public, curve_secret_key=admin_secret) as admin, \
                Client(sup.endpoint, timeout=10, curve_server_key=server_public, curve_secret_key=viewer_secret) as viewer:
            assert admin.start("echo", "hi", id="e1").result(timeout=10) == "hi"
            assert viewer.get_handle("e1").result(timeout=10) == "hi"
            assert viewer.get_handle("e1").describe()["status"] == "completed"
            with pytest.raises(PermissionDenied):
                viewer.start("echo", "no", id="e2")
            with pytest.raises(PermissionDenied):
                viewer.get_handle("e1").terminate()

            os.unlink(full / "admin.key")
            sup.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while True:
                try:
                    admin.ping()
                except PermissionDenied:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.05)
            with pytest.raises(PermissionDenied):
                admin.start("echo", "late", id="e3")
            assert sup.process.poll() is None  # SIGHUP reloads; it does not stop the supervisor


def test_insecure_bind_serves_and_warns(tmp_path):
    sup = RunningSupervisor(tmp_path / "data", shards=1, app=APP)
    sup.command += ["--bind", f"tcp://0.0.0.0:{sup.port}", "--insecure-bind"]
    with sup:
        with Client(sup.endpoint, timeout=10) as client:
            assert client.ping() == "pong"
        assert any("--insecure-bind" in line and "WARNING" in line for line in sup.stderr_lines)
