"""The ``shards`` op is admin-only under CURVE (a read-only key may not restart the shards),
and ``SIGHUP`` both reloads the CURVE keys and rolls the shards."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import zmq.auth

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.errors import PermissionDenied

pytestmark = pytest.mark.timeout(90)


def test_shards_is_admin_only_and_sighup_reloads_keys_and_rolls(tmp_path: Path) -> None:
    certs, full, readonly = tmp_path / "certs", tmp_path / "full", tmp_path / "readonly"
    for directory in (certs, full, readonly):
        directory.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(certs), "server")
    admin_public, admin_secret = zmq.auth.create_certificates(str(certs), "admin")
    viewer_public, viewer_secret = zmq.auth.create_certificates(str(certs), "viewer")
    os.replace(admin_public, full / "admin.key")
    os.replace(viewer_public, readonly / "viewer.key")
    args = ("--curve-secret-key", server_secret, "--curve-authorized-keys", str(full), "--curve-readonly-keys", str(readonly))
    with RunningSupervisor(tmp_path / "data", shards=2, app="roll_app", args=args, env={"WEFT_TEST_RUNS": str(tmp_path)}) as sup:
        with Client(sup.endpoint, timeout=10, curve_server_key=server_public, curve_secret_key=admin_secret) as admin, \
                Client(sup.endpoint, timeout=10, curve_server_key=server_public, curve_secret_key=viewer_secret) as viewer:
            with pytest.raises(PermissionDenied):
                viewer.shards("restart")
            with pytest.raises(PermissionDenied):
                viewer.shards("list")
            before = [shard["pid"] for shard in admin.shards("list")["shards"]]
            os.unlink(readonly / "viewer.key")
            sup.process.send_signal(signal.SIGHUP)
            last = wait_until(lambda: admin.shards("list")["roll"]["last"], 60, "the roll ended")
            assert last["outcome"] == "completed" and last["source"] == "SIGHUP", last
            assert not {shard["pid"] for shard in admin.shards("list")["shards"]} & set(before)
            with pytest.raises(PermissionDenied, match="no longer authorised"):  # the keys were reloaded too
                viewer.ping()
