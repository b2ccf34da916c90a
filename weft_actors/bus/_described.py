"""The payloads of a ``describe`` answer that travel as codec bytes (``payloads_encoded``:
``shard._describe``, ``shard._describe_ops``), decoded by the client that reads them.

A value of a type this process has not registered costs that field, never the answer: it is
``None`` with a ``<field>_error`` beside it (``try_decode``), as the input is
(``input_error``). A client that does not import the app still reads everything else.
"""

from __future__ import annotations

from typing import Any

from ..codec import try_decode

__all__ = ["decode_payloads"]


def _decode_field(holder: dict[str, Any], field: str, where: str) -> None:
    data = holder.get(field)
    if isinstance(data, bytes):
        holder[field], error = try_decode(data, where)
        if error is not None:
            holder[f"{field}_error"] = error


def decode_payloads(described: dict[str, Any]) -> None:
    """Decode in place the workflow's ``result`` and ``memo`` and each history op's
    ``payload``, ``args`` and ``result``."""
    for field in ("result", "memo"):
        _decode_field(described, field, f"workflow {field}")
    for entry in described.get("history") or ():
        for field in ("payload", "args", "result"):
            _decode_field(entry, field, f"{field} of an op")
