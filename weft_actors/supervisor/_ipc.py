"""The supervisor's private directory of unix sockets (front door's shard side, hint bus).

Those sockets stay on this machine, and a unix socket costs the kernel less per message than
loopback TCP. A supervisor killed with ``kill -9`` leaves its directory behind, so each start
removes the ones whose supervisor is gone; without a directory the caller falls back to TCP.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

__all__ = ["make_ipc_dir", "remove_ipc_dir", "remove_stale_ipc_dirs"]

log = logging.getLogger("weft_actors.supervisor")

IPC_PREFIX = "weft-ipc-"


def remove_stale_ipc_dirs() -> None:
    """Remove the socket directories of supervisors that died without cleaning up (kill -9):
    ``weft-ipc-<pid>-*`` in the temporary directory, ours, whose process is gone."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(IPC_PREFIX):
            continue
        pid_text = name[len(IPC_PREFIX):].partition("-")[0]
        path = os.path.join(root, name)
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:  # alive (or not ours to signal), or already gone
            continue


def make_ipc_dir() -> str | None:
    """A fresh private directory for this supervisor's sockets (stale ones removed first), or
    None if none can be made: the caller then uses loopback TCP."""
    remove_stale_ipc_dirs()
    try:
        return tempfile.mkdtemp(prefix=f"{IPC_PREFIX}{os.getpid()}-")
    except OSError as exc:
        log.warning("no private directory for unix sockets (%s); using loopback TCP", exc)
        return None


def remove_ipc_dir(path: str | None) -> None:
    """Remove the directory ``make_ipc_dir`` made (nothing if it made none)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
