"""One log line for each thing about a workflow an operator would want to find later: it
failed, an activity attempt failed or timed out, a retry was scheduled, it was quarantined,
another engine took it over.

Each line names the workflow, its type and (where there is one) the op in its text, and
carries the same facts as structured fields (``extra=``), under the same names on every
line, so that ``--log-json`` output can be filtered by them:

    event          workflow_failed, activity_attempt_failed, activity_attempt_timed_out,
                   activity_retry_scheduled, workflow_quarantined, workflow_taken_over
                   (the first 20 of one takeover transaction), workflows_taken_over (the
                   rest of it, one line per engine taken from, with ``count``)
    workflow_id, workflow_type, run_id, engine_id
    op, op_kind, op_seq        the op's name (an activity's), kind and sequence number
    attempt                    the attempt that failed, or the one a retry will make
    error_type, error          what was raised (its message, shortened)
    retry_in                   seconds until the retry
    from_engine, epoch         a takeover: the engine it was taken from (None: released)
    lost_owners                a quarantine: owners lost in a row without progress

Only events are logged, never a step that went well: a line costs a few microseconds, and a
busy engine makes hundreds of thousands of steps a second.
"""

from __future__ import annotations

import logging
from typing import Any

from ..store import describe_reason

__all__ = [
    "workflow_failed",
    "activity_attempt_failed",
    "activity_retry_scheduled",
    "workflow_quarantined",
    "workflow_taken_over",
    "workflows_taken_over",
]

log = logging.getLogger("weft_actors.shard")

MESSAGE_CHARS = 300
"""How much of an error's message a line carries (the whole one is in the workflow's record)."""


def _short(text: Any) -> str:
    text = str(text)
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def _op_text(seq: int, activity: str) -> str:
    return f"op #{seq} activity {activity!r}"


def workflow_failed(engine_id: str, wid: str, wf_type: str, run_id: str, error: dict[str, Any] | None) -> None:
    error = error or {}
    error_type, message = error.get("type"), _short(error.get("message", ""))
    log.warning(
        "workflow %s (%s) failed: %s: %s",
        wid, wf_type, error_type, message,
        extra={
            "event": "workflow_failed", "workflow_id": wid, "workflow_type": wf_type, "run_id": run_id,
            "engine_id": engine_id, "error_type": error_type, "error": message,
        },
    )


def _op_fields(wid: str, wf_type: str, run_id: str, engine_id: str, seq: int, activity: str, attempt: int) -> dict[str, Any]:
    return {
        "workflow_id": wid, "workflow_type": wf_type, "run_id": run_id, "engine_id": engine_id,
        "op": activity, "op_kind": "activity", "op_seq": seq, "attempt": attempt,
    }


def activity_attempt_failed(
    engine_id: str, wid: str, wf_type: str, run_id: str, seq: int, activity: str, attempt: int,
    error: BaseException, *, timed_out: bool, final: bool,
) -> None:
    """An attempt that raised (or ran out of ``start_to_close``): INFO while a retry follows,
    WARNING when it was the last one and the op fails with it."""
    error_type, message = type(error).__name__, _short(error)
    what = "timed out" if timed_out else "failed"
    after = "; no retry left, the op fails" if final else ""
    log.log(
        logging.WARNING if final else logging.INFO,
        "workflow %s (%s) %s: attempt %d %s: %s: %s%s",
        wid, wf_type, _op_text(seq, activity), attempt, what, error_type, message, after,
        extra={
            "event": "activity_attempt_timed_out" if timed_out else "activity_attempt_failed",
            **_op_fields(wid, wf_type, run_id, engine_id, seq, activity, attempt),
            "error_type": error_type, "error": message,
        },
    )


def activity_retry_scheduled(engine_id: str, wid: str, wf_type: str, run_id: str, seq: int, activity: str, attempt: int, retry_in: float) -> None:
    """Attempt ``attempt`` of the op will start in ``retry_in`` seconds (a durable timer)."""
    log.info(
        "workflow %s (%s) %s: retry scheduled, attempt %d in %.3gs",
        wid, wf_type, _op_text(seq, activity), attempt, retry_in,
        extra={
            "event": "activity_retry_scheduled",
            **_op_fields(wid, wf_type, run_id, engine_id, seq, activity, attempt),
            "retry_in": retry_in,
        },
    )


def workflow_quarantined(engine_id: str, wid: str, wf_type: str, run_id: str, lost_owners: int, reason: dict[str, Any] | None) -> None:
    """Parked instead of driven; ``reason`` is what held the lost owners' loops (the op and
    activity, or the workflow's own code at an op), as their stall note or death record said."""
    running = describe_reason(reason)
    reason = reason or {}
    seq, kind, name = reason.get("seq"), reason.get("kind"), reason.get("name")
    log.error(
        "workflow %s (%s) quarantined: its own code held the loop of %d lost owner(s) in a row "
        "(a stall or death charged to it), without committing progress; it was running %s. "
        "Fix the code, then lift it with `python -m weft_actors retry %s` (or terminate it)",
        wid, wf_type, lost_owners, running, wid,
        extra={
            "event": "workflow_quarantined", "workflow_id": wid, "workflow_type": wf_type, "run_id": run_id,
            "engine_id": engine_id, "op": name, "op_kind": kind, "op_seq": seq, "lost_owners": lost_owners,
        },
    )


def workflow_taken_over(engine_id: str, wid: str, wf_type: str | None, from_engine: str | None, epoch: int, source: str | None = None) -> None:
    """This engine claimed ``wid`` from an owner that was lost, or that released it at its
    stop (``from_engine``; None: never held), described by ``source`` (``_takeover_source``).
    The op it resumes is known only once it is replayed, after this."""
    source = source or (f"engine {from_engine}" if from_engine is not None else "nobody (released, or never claimed)")
    log.info(
        "workflow %s (%s) taken over from %s at epoch %d",
        wid, wf_type, source, epoch,
        extra={
            "event": "workflow_taken_over", "workflow_id": wid, "workflow_type": wf_type,
            "engine_id": engine_id, "from_engine": from_engine, "epoch": epoch,
        },
    )


def workflows_taken_over(engine_id: str, count: int, from_engine: str | None, source: str | None = None) -> None:
    """The rest of one takeover past its per-workflow lines, in one line (``_reclaim``)."""
    source = source or (f"engine {from_engine}" if from_engine is not None else "nobody (released, or never claimed)")
    log.info(
        "%d more workflows taken over from %s",
        count, source,
        extra={"event": "workflows_taken_over", "engine_id": engine_id, "from_engine": from_engine, "count": count},
    )
