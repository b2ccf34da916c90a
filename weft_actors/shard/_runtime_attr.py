"""``RuntimeAttr``: an attribute of the engine facade that is really its runtime's.

Callers and tests read ``engine.store``, ``engine.actors`` or ``engine.heartbeat`` (and a few
set a setting, or swap a method for a test double); the runtime (``_hosting.ActorHost``) is
what its parts read. Forwarding each such name keeps one value of each thing, with no copy to
fall out of step. Only the facade reads through it, never a per-step path.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, cast

__all__ = ["RuntimeAttr"]

T = TypeVar("T")


class RuntimeAttr(Generic[T]):
    """Read and set ``owner._host.<name>`` as ``owner.<name>``."""

    __slots__ = ("_name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, facade: Any, owner: type | None = None) -> T:
        return cast(T, getattr(facade._host, self._name))

    def __set__(self, facade: Any, value: T) -> None:
        setattr(facade._host, self._name, value)
