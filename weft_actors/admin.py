"""Operator commands on a data directory: ``backup``, ``purge``, ``replay``.

    python -m weft_actors backup DEST [--data DIR]
    python -m weft_actors purge [--status S] [--older-than 7d] [--id ID ...] [--data DIR] [--yes]
    python -m weft_actors replay ID --app MODULE [--data DIR]

They open the store directly (beside running engines is fine: LMDB serialises writers and
readers see snapshots). ``restore`` is a procedure, not a command: stop the supervisor,
replace the data directory with the backup, start it again.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import time
from typing import Any, Sequence

from .codec import decode, decode_args
from .errors import UnknownWorkflowType, WeftError, WorkflowNotFound
from .store import LmdbStore
from .store._admin import backup, purge, purge_candidates
from .workflow import WorkflowRun, collect_workflows

__all__ = ["COMMANDS", "main", "parse_duration", "replay_report"]

COMMANDS = ("backup", "purge", "replay")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """``90``, ``45s``, ``30m``, ``12h``, ``7d``, ``2w`` -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use e.g. 45s, 30m, 12h, 7d)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def replay_report(definition: Any, workflow_id: str, record: dict[str, Any], ops: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Replay a recorded history against ``definition`` without executing or writing anything.

    ``ok`` is False at the first divergence (``NonDeterminismError``'s message says where).
    """
    run = WorkflowRun(definition, workflow_id, record["run_id"], decode_args(record["args"]), dict(ops))
    try:
        commands = run.start()
    finally:
        run.close()
    recorded = sum(1 for op in ops.values() if "t" in op)
    report: dict[str, Any] = {"id": workflow_id, "type": record["type"], "status": record["status"], "recorded_outcomes": recorded}
    command = commands[0] if commands else None
    if command is None:
        report.update(ok=True, next=None)
    elif command.kind == "stuck":
        report.update(ok=False, divergence=command.error["message"])  # type: ignore[index]
    elif command.kind == "op":
        report.update(ok=True, next={"seq": command.seq, "kind": command.op.kind, "name": command.op.name})  # type: ignore[union-attr]
    elif command.kind == "complete":
        same = record["status"] != "completed" or decode(command.payload) == decode(record["result"])  # type: ignore[arg-type]
        report.update(ok=same, next="complete")
        if not same:
            report["divergence"] = "replay completed with a different result than the recorded one"
    else:
        expected = record["status"] in ("failed", "running")
        report.update(ok=expected, next="fail", error=command.error.get("message") if command.error else None)
        if not expected:
            report["divergence"] = f"replay fails but the recorded run ended {record['status']}"
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m weft_actors", description="operator commands")
    parser.add_argument("--data", default="./weft-data", help="data directory (default ./weft-data)")
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("backup", help="a consistent hot copy of the store (compacted)")
    cmd.add_argument("destination")
    cmd = commands.add_parser("purge", help="remove finished workflows (dry run unless --yes)")
    cmd.add_argument("--status", choices=("completed", "failed", "cancelled", "terminated", "timed_out", "continued"))
    cmd.add_argument("--older-than", type=parse_duration, help="e.g. 7d, 12h")
    cmd.add_argument("--id", action="append", dest="ids", help="a workflow id (repeatable)")
    cmd.add_argument("--yes", action="store_true", help="really delete")
    cmd = commands.add_parser("replay", help="replay one workflow's history against current code")
    cmd.add_argument("workflow_id")
    cmd.add_argument("--app", required=True, help="module holding the @workflow functions")
    for sub in commands.choices.values():
        sub.add_argument("--data", default=argparse.SUPPRESS, help="data directory")
    return parser


def _run(args: argparse.Namespace, out: Any) -> int:
    if args.command == "backup":
        store = LmdbStore(args.data)
        try:
            size = backup(store, args.destination)
        finally:
            store.close()
        out.write(f"backup of {args.data} written to {args.destination} ({size} bytes)\n")
        return 0
    if args.command == "purge":
        store = LmdbStore(args.data)
        try:
            if args.ids:
                targets = list(args.ids)
            elif args.status is None and args.older_than is None:
                raise ValueError("purge needs --id, --status or --older-than")
            else:
                targets = [item["id"] for item in purge_candidates(store, args.status, args.older_than, time.time())]
            if not args.yes:
                for wid in targets:
                    out.write(f"would purge {wid}\n")
                out.write(f"{len(targets)} workflow(s) would be purged; add --yes to purge them\n")
                return 0
            outcome = purge(store, targets)
        finally:
            store.close()
        failed = {wid: code for wid, code in outcome.items() if code != "purged"}
        for wid, code in failed.items():
            out.write(f"not purged {wid}: {code}\n")
        out.write(f"{len(outcome) - len(failed)} workflow(s) purged\n")
        return 1 if failed else 0
    store = LmdbStore(args.data, readonly=True)
    try:
        record, _, ops, _ = store.load_for_replay(args.workflow_id)
    finally:
        store.close()
    if record is None:
        raise WorkflowNotFound(f"workflow {args.workflow_id!r} not found", workflow_id=args.workflow_id)
    definitions = collect_workflows(importlib.import_module(args.app))
    definition = definitions.get(record["type"])
    if definition is None:
        raise UnknownWorkflowType(f"{args.app} has no workflow {record['type']!r}", workflow_type=record["type"])
    report = replay_report(definition, args.workflow_id, record, ops)
    out.write(json.dumps(report, default=str) + "\n")
    return 0 if report["ok"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return _run(args, sys.stdout)
    except WeftError as exc:
        sys.stderr.write(f"error: {exc.code}: {exc}\n")
        return 1
    except (ValueError, OSError, ImportError) as exc:
        sys.stderr.write(f"error: usage: {exc}\n")
        return 2
