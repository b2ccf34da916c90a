"""Intents the appliers send each other through the table (``_table.apply_intent``).

They never come from an engine: each names one effect of a transition that another applier
owns, so the applier causing it needs only this record, not the module that applies it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._intents import StepCommit

__all__ = ["EffectfulStep", "OnTerminal", "ParentClose", "ReleaseSlot"]


class EffectfulStep(NamedTuple):
    """An owner's step whose fence is checked and that carries ``effects`` (``_effects``)."""

    step: StepCommit


class OnTerminal(NamedTuple):
    """``wid``'s record, now terminal and written, reaches its relatives (``_children``):
    returns the workflows it touched."""

    wid: str
    record: dict[str, Any]


class ParentClose(NamedTuple):
    """Apply the ``parent_close`` policy of the children run ``run_id`` of ``wid`` started
    (``_children``): returns the workflows it touched."""

    wid: str
    record: dict[str, Any]
    run_id: str | None = None


class ReleaseSlot(NamedTuple):
    """A workflow holding a flow slot ended: its slot goes to the head of its group's queue
    (``_lifecycle.release_slot``)."""

    record: dict[str, Any]
