"""``python -m weft_actors schedule ...``: create, list, describe and act on schedules.

A schedule is a workflow of type ``weft.schedule``, but its user thinks in schedules: ``list``
shows each one's spec, state, next fire and last run (from its ``describe`` query, not the
workflow's status, which says ``running`` for a paused schedule and ``completed`` for a
deleted one), ``describe`` reads as a page, times may be ISO 8601, and an error names the
schedule (``schedule 's5' already exists``), not the workflow beneath it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from typing import Any, Callable, TextIO

from ._cli_json import json_args
from ._cli_output import columns, emit, iso_times, readable
from ._schedule_spec import OVERLAP_POLICIES, SCHEDULE_TYPE
from .bus import Client
from .errors import UnknownQuery, UpdateRejected, WorkflowAlreadyExists, WorkflowNotFound

__all__ = ["add_schedule_commands", "epoch_or_iso", "run_schedule"]


def epoch_or_iso(text: str) -> float:
    """A time as epoch seconds (``1767225600``) or ISO 8601 (``2026-01-01T00:00:00Z``; a time
    without an offset is UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = _dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: write ISO 8601 (e.g. 2026-01-01T09:00:00Z) or epoch seconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return moment.timestamp()


def add_schedule_commands(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("create", help="create a schedule", parents=[common])
    p.add_argument("id", help="the schedule id (its runs are ID/<fire time ISO>)")
    p.add_argument("workflow")
    p.add_argument("args", nargs="?", type=json_args, default=(), metavar="ARGS_JSON", help="JSON array of the workflow's arguments")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="5 fields (or 6, seconds first), e.g. '0 9 * * mon-fri' (needs the [cron] extra)")
    when.add_argument("--every", type=float, metavar="S", help="an interval in seconds")
    p.add_argument("--offset", type=float, default=0.0, metavar="S", help="shift of --every's grid (default 0)")
    p.add_argument("--timezone", default="UTC", help="zoneinfo name the cron string is read in (default UTC)")
    p.add_argument("--start", type=epoch_or_iso, metavar="TIME", help="no fire before this (ISO 8601 or epoch seconds)")
    p.add_argument("--end", type=epoch_or_iso, metavar="TIME", help="no fire after this (ISO 8601 or epoch seconds)")
    p.add_argument("--jitter", type=float, default=0.0, metavar="S", help="delay each fire by up to S seconds")
    p.add_argument("--overlap", choices=OVERLAP_POLICIES, default="skip", help="when the previous run still runs (default: %(default)s)")
    p.add_argument("--catchup-window", type=float, default=60.0, metavar="S", help="missed fires younger than this still start (default 60)")
    p.add_argument("--paused", action="store_true", help="create it paused")
    p.add_argument("--note")
    actions.add_parser("list", help="list schedules: spec, state, next fire, last run", parents=[common]).add_argument("--limit", type=int, default=100)
    for name, help in (("describe", "spec, state, next fire times, recent runs, counts"), ("trigger", "fire now"), ("delete", "fire no more")):
        actions.add_parser(name, help=help, parents=[common]).add_argument("id")
    for name, help in (("pause", "stop firing until unpaused"), ("unpause", "fire again (what fell due meanwhile is not caught up)")):
        p = actions.add_parser(name, help=help, parents=[common])
        p.add_argument("id")
        p.add_argument("--note")
    p = actions.add_parser("backfill", help="start every fire time in [START, END] not started yet", parents=[common])
    p.add_argument("id")
    p.add_argument("start", type=epoch_or_iso, metavar="START", help="ISO 8601 (e.g. 2026-01-01T00:00:00Z) or epoch seconds")
    p.add_argument("end", type=epoch_or_iso, metavar="END", help="ISO 8601 or epoch seconds")


def run_schedule(args: argparse.Namespace, out: TextIO, client: Client) -> None:
    action = args.action
    if action == "create":
        spec = {"cron": args.cron, "every": args.every, "offset": args.offset, "timezone": args.timezone, "start": args.start, "end": args.end, "jitter": args.jitter}
        try:
            handle = client.create_schedule(
                args.id, args.workflow, *args.args, spec=spec, overlap=args.overlap, catchup_window=args.catchup_window, paused=args.paused, note=args.note,
            )
        except WorkflowAlreadyExists as exc:
            raise WorkflowAlreadyExists(f"schedule {args.id!r} already exists (or a workflow of that id)", **exc.context) from None
        emit(args, out, {"id": handle.id}, f"schedule {handle.id} created")
        return
    if action == "list":
        page = client.list(type=SCHEDULE_TYPE, limit=args.limit)
        described = [_schedule_call(item["id"], client.get_schedule(item["id"]).describe) for item in page.get("items") or []]
        value = {"items": described, "cursor": page.get("cursor")}
        emit(args, out, value, _schedule_table(value))
        return
    schedule = client.get_schedule(args.id)
    if action == "describe":
        value = _schedule_call(args.id, schedule.describe)
        emit(args, out, value, _schedule_page(value))
        return
    if action in ("pause", "unpause"):
        _schedule_call(args.id, lambda: getattr(schedule, action)(args.note))
    elif action == "backfill":
        _schedule_call(args.id, lambda: schedule.backfill(args.start, args.end))
    else:
        _schedule_call(args.id, getattr(schedule, action))
    emit(args, out, {"ok": True}, "ok")


def _schedule_call(sid: str, call: Callable[[], Any]) -> Any:
    """``call()``, its errors told in terms of schedule ``sid``: one that does not exist, or a
    workflow that is not a schedule (it has none of a schedule's query and update handlers)."""
    try:
        return call()
    except WorkflowNotFound as exc:
        raise WorkflowNotFound(f"schedule {sid!r} not found", **exc.context) from None
    except UnknownQuery as exc:
        raise WorkflowNotFound(f"schedule {sid!r} not found (workflow {sid!r} is not a schedule)", **exc.context) from None
    except UpdateRejected as exc:
        if "has no update handler" not in exc.message:
            raise
        raise WorkflowNotFound(f"schedule {sid!r} not found (workflow {sid!r} is not a schedule)", **exc.context) from None


def _state(value: dict[str, Any]) -> str:
    return "deleted" if value.get("deleted") else "paused" if value.get("paused") else "active"


def _spec_text(spec: Any) -> str:
    if not isinstance(spec, dict):
        return readable(spec)
    if spec.get("cron"):
        text = f"cron {spec['cron']}" + (f" ({spec['timezone']})" if spec.get("timezone") not in (None, "UTC") else "")
    else:
        text = f"every {spec.get('every'):g}s" + (f" +{spec['offset']:g}s" if spec.get("offset") else "")
    return text + (f" jitter {spec['jitter']:g}s" if spec.get("jitter") else "")


def _last_run(value: dict[str, Any]) -> str:
    recent = value.get("recent") or []
    return f"{recent[-1]['status']} ({recent[-1].get('nominal_iso')})" if recent else "-"


def _schedule_table(page: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [("ID", "WORKFLOW", "SPEC", "STATE", "NEXT FIRE", "LAST RUN")]
    for value in page["items"]:
        upcoming = value.get("next_iso") or []
        rows.append((value["id"], str(value.get("workflow")), _spec_text(value.get("spec")), _state(value), upcoming[0] if upcoming else "-", _last_run(value)))
    lines = columns(rows)
    if page.get("cursor"):
        lines.append(f"next: --cursor {page['cursor']}")
    return "\n".join(lines)


def _schedule_page(value: dict[str, Any]) -> str:
    """``describe`` for a person: one fact a line, then the next fire times and recent runs."""
    shown = iso_times(value)
    spec: dict[str, Any] = value["spec"] if isinstance(value.get("spec"), dict) else {}
    state = _state(value) + (f" ({value['note']})" if value.get("note") else "")
    lines = [
        f"schedule   {value.get('id')}",
        f"workflow   {value.get('workflow')}",
        f"spec       {_spec_text(value.get('spec'))}",
        f"timezone   {spec.get('timezone') or 'UTC'}",
        f"state      {state}",
        f"overlap    {value.get('overlap')}  (catch-up window {value.get('catchup_window')}s)",
        f"last fire  {shown.get('last_fire') or '-'}",
        f"counts     fired {value.get('fired')}, missed {value.get('missed')}, skipped {value.get('skipped')}, buffered {value.get('buffered')}",
        "next fires " + (", ".join(shown.get("next") or []) or "-"),
        "recent runs" + ("" if shown.get("recent") else " -"),
    ]
    lines += [f"  {run.get('nominal')}  {run.get('status')}  {run.get('id')}" for run in shown.get("recent") or []]
    return "\n".join(lines)
