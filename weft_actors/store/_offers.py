"""Which workflow types each engine runs, as its registry record says, and how the engines
sharing a store differ.

An engine takes over, fires and creates claims only for the types its app registers, so two
apps on one store split the work silently: a workflow whose type only some engines register
waits for one of those, and starts of it are refused by the others. Each engine records its
types (``types``, a sorted list) in its registry record when it registers; ``offered_types``
reads them, and a record without them (written by an older version, or by a tool that
registers no app) counts as running every type, which is what its reader assumed before.
The field is optional, so older records need no migration.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["offered_types", "type_mismatches", "describe_type_mismatch"]

_NAMES_SHOWN = 10
"""Type names a message lists at most (then how many more)."""


def offered_types(record: Mapping[str, Any]) -> frozenset[str] | None:
    """The workflow types ``record``'s engine registered; None if it did not say."""
    types = record.get("types")
    return None if types is None else frozenset(types)


def type_mismatches(mine: Iterable[str], records: Mapping[str, Mapping[str, Any]]) -> list[tuple[frozenset[str], list[str]]]:
    """The engines of ``records`` (id -> registry record) whose types differ from ``mine``,
    grouped by the types they register: ``(types, sorted engine ids)``, in a stable order.
    Engines that did not record their types are left out: nothing is known to differ."""
    wanted = frozenset(mine)
    groups: dict[frozenset[str], list[str]] = {}
    for engine_id, record in records.items():
        theirs = offered_types(record)
        if theirs is not None and theirs != wanted:
            groups.setdefault(theirs, []).append(engine_id)
    return sorted(((types, sorted(ids)) for types, ids in groups.items()), key=lambda group: group[1])


def describe_type_mismatch(who: str, mine: Iterable[str], groups: list[tuple[frozenset[str], list[str]]]) -> str:
    """One WARNING's text: ``who`` (this engine, or a supervisor's shards) and each group of
    ``type_mismatches``, with the types each side lacks, and what that means."""
    wanted = frozenset(mine)
    parts = []
    for types, ids in groups:
        engines = ", ".join(ids) if len(ids) <= 3 else f"{', '.join(ids[:3])} and {len(ids) - 3} more"
        sides = []
        if wanted - types:
            sides.append(f"they lack {_names(wanted - types)}")
        if types - wanted:
            sides.append(f"{_names(types - wanted)} only they run")
        parts.append(f"engine{'s' if len(ids) > 1 else ''} {engines}: {'; '.join(sides)}")
    return (
        f"engines on this store register different workflow types: {who} runs {_names(wanted)}; "
        + "; ".join(parts)
        + ". Each engine runs, takes over and starts only the types it registers, so a workflow "
        "whose type some engines lack waits for one that has it; start every engine on a store "
        "with the same app unless that split is meant"
    )


def _names(types: Iterable[str]) -> str:
    names = sorted(types)
    if not names:
        return "no workflow types"
    shown = ", ".join(names[:_NAMES_SHOWN])
    return f"[{shown}]" if len(names) <= _NAMES_SHOWN else f"[{shown}, and {len(names) - _NAMES_SHOWN} more]"
