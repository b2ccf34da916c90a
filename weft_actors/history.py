"""A workflow's recorded history as a JSON document, to replay against new code elsewhere.

``python -m weft_actors export ID > h.json`` writes one; ``replay --history h.json --app M``
and ``weft_actors.testing.replay_history`` replay it without a data directory: in CI, on a
laptop, or attached to a bug report. The document holds the workflow's record and the op
log of its current run, exactly as stored: payloads stay in the engine's codec (a JSON object
``{"$b64": ...}`` per byte string), so what replays is byte for byte what the engine
recorded, whatever types the payloads carry.

    {"format": "weft-history", "version": 1, "workflow_id": "order-1",
     "record": {"type": "order", "args": {"$b64": "kqRvLTEx"}, "status": "running", ...},
     "ops": [{"seq": 0, "kind": "activity", "name": "charge", "ok": {"$b64": "..."}, ...}]}
"""

from __future__ import annotations

import base64
import json
from typing import Any, NamedTuple

from .errors import InvalidRequest, WorkflowNotFound

__all__ = ["FORMAT", "VERSION", "History", "export_history", "dumps", "loads"]

FORMAT = "weft-history"
VERSION = 1
_BYTES = "$b64"


class History(NamedTuple):
    """One workflow's record and the op log of its current run (``seq`` -> op)."""

    workflow_id: str
    record: dict[str, Any]
    ops: dict[int, dict[str, Any]]


def export_history(store: Any, workflow_id: str) -> History:
    """Read ``workflow_id``'s history from ``store`` in one snapshot; ``WorkflowNotFound``
    if there is no such workflow."""
    record, _, ops, _ = store.load_for_replay(workflow_id)
    if record is None:
        raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
    return History(workflow_id, record, ops)


def dumps(history: History) -> str:
    """The JSON document of ``history`` (one line)."""
    document = {
        "format": FORMAT,
        "version": VERSION,
        "workflow_id": history.workflow_id,
        "record": _tag(history.record),
        "ops": [{"seq": seq, **_tag(op)} for seq, op in sorted(history.ops.items())],
    }
    return json.dumps(document, separators=(",", ":"), allow_nan=True)


def loads(text: str | bytes) -> History:
    """Parse a document written by ``dumps``; ``InvalidRequest`` (code ``invalid_request``)
    naming what is wrong with anything else."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(f"not a weft history: not JSON ({exc})") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InvalidRequest(f"not a weft history: no \"format\": \"{FORMAT}\"")
    if document.get("version") != VERSION:
        raise InvalidRequest(f"weft history version {document.get('version')!r} is not supported (this release reads {VERSION})")
    workflow_id, record, ops = document.get("workflow_id"), document.get("record"), document.get("ops")
    if not isinstance(workflow_id, str) or not isinstance(record, dict) or not isinstance(ops, list):
        raise InvalidRequest("weft history needs a string \"workflow_id\", an object \"record\" and a list \"ops\"")
    for key in ("type", "run_id", "status", "args"):
        if key not in record:
            raise InvalidRequest(f"weft history record has no {key!r}")
    log: dict[int, dict[str, Any]] = {}
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("seq"), int) or not isinstance(op.get("kind"), str):
            raise InvalidRequest(f"weft history op {op!r} needs an integer \"seq\" and a string \"kind\"")
        entry = _untag(op)
        log[entry.pop("seq")] = entry
    return History(workflow_id, _untag(record), log)


def _tag(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(key): _tag(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tag(item) for item in value]
    return value


def _untag(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _BYTES in value:
            encoded = value[_BYTES]
            if not isinstance(encoded, str):
                raise InvalidRequest(f"weft history: {_BYTES} must be a base64 string")
            try:
                return base64.b64decode(encoded, validate=True)
            except ValueError as exc:
                raise InvalidRequest(f"weft history: bad base64 in {_BYTES}: {exc}") from exc
        return {key: _untag(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_untag(item) for item in value]
    return value
