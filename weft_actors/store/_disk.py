"""What a failed LMDB call means for its caller: out of room, not writable, or broken.

A full disk does not always say so. LMDB reports a write that failed outright with its errno
(``No space left on device``, ``Disk quota exceeded``), but a write that was cut short -- the
usual end of a filling disk -- as ``EIO``, and py-lmdb keeps only the message. So an ``EIO``
counts as out of space when the filesystem holding the store has (almost) no room left for an
unprivileged writer; a genuine I/O error on a disk with room stays a ``StorageError``. Every
out-of-space condition is ``StorageFull``, which callers already retry with back-off. A
read-only filesystem or a permission refusal is a ``StorageError`` with ``reason="read_only"``:
reads still work, and the engine keeps serving them until the store is writable again.
"""

from __future__ import annotations

import errno
import os
from typing import Final

import lmdb

from ..errors import StorageError, StorageFull

__all__ = ["storage_failure", "is_read_only", "is_unreachable", "writes_refused", "READ_ONLY", "UNREACHABLE"]

READ_ONLY: Final = "read_only"
"""The ``reason`` of a ``StorageError`` for a store that cannot be written (EROFS, EACCES)."""

UNREACHABLE: Final = "unreachable"
"""The ``reason`` of a ``StorageError`` for a database server that cannot be reached now."""

LOW_SPACE: Final = 16 << 20
"""Free bytes below which an ``EIO`` from a commit is taken for a full disk (or 1 % of it)."""

_FULL = tuple(os.strerror(code) for code in (errno.ENOSPC, errno.EDQUOT))
_READ_ONLY = tuple(os.strerror(code) for code in (errno.EROFS, errno.EACCES, errno.EPERM))
_EIO = os.strerror(errno.EIO)


def _low_on_space(path: str) -> bool:
    try:
        info = os.statvfs(path)
    except OSError:
        return False
    free = info.f_bavail * info.f_frsize
    return free < max(LOW_SPACE, info.f_blocks * info.f_frsize // 100)


def storage_failure(exc: BaseException, path: str, what: str) -> StorageError | StorageFull:
    """The error to report for ``exc`` (an ``lmdb.Error`` or ``OSError``) raised by ``what``
    ("commit failed", ...) on the store at ``path``."""
    text = str(exc)
    if isinstance(exc, lmdb.MapFullError):
        return StorageFull(f"store is full (its map size is reached): {text}; free space or enlarge the map", path=path)
    if isinstance(exc, lmdb.DiskError) or any(marker in text for marker in _FULL) or (
        _EIO in text and _low_on_space(path)
    ):
        return StorageFull(
            f"the disk holding the store at {path} is full ({text}); free space on it",
            path=path,
            reason="disk_full",
        )
    if isinstance(exc, lmdb.ReadonlyError) or any(marker in text for marker in _READ_ONLY):
        return StorageError(
            f"the store at {path} is not writable ({text}): check that its filesystem is mounted "
            f"read-write and that this user may write the directory and its files",
            path=path,
            reason=READ_ONLY,
        )
    return StorageError(f"{what}: {text}", path=path)


def is_read_only(error: BaseException) -> bool:
    return isinstance(error, StorageError) and getattr(error, "reason", None) == READ_ONLY


def is_unreachable(error: BaseException) -> bool:
    return isinstance(error, StorageError) and getattr(error, "reason", None) == UNREACHABLE


FULL_BELOW: Final = 64 * 1024
"""Free bytes under which ``writes_refused`` takes a filesystem as full."""


def writes_refused(path: str) -> bool:
    """Whether the filesystem holding ``path`` refuses writes now: mounted read-only, or
    (nearly) no space left. One ``statvfs``; False if that fails (nothing is known)."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    return bool(stats.f_flag & os.ST_RDONLY) or stats.f_bavail * stats.f_frsize < FULL_BELOW
