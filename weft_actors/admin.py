"""Operator commands on a store: ``backup``, ``purge``, ``replay``, ``export``.

    python -m weft_actors backup DEST [--data DIR]
    python -m weft_actors purge [--status S] [--older-than 7d] [--id ID ...] [--data DIR|URL] [--yes]
    python -m weft_actors replay ID --app MODULE [--data DIR|URL]
    python -m weft_actors replay --history FILE --app MODULE
    python -m weft_actors export ID [--data DIR|URL] > FILE

``--data`` is a data directory (LMDB) or a ``postgresql://`` URL. They open the store directly
(beside running engines is fine: both backends serialise writers and readers see snapshots).
``backup`` copies an LMDB directory; a PostgreSQL store is backed up with ``pg_dump``.
``restore`` is a procedure, not a command: stop the supervisor, replace the data directory with
the backup (or ``pg_restore`` the dump), start it again.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import time
from typing import Any, Sequence, cast

from . import history
from .errors import WeftError
from .store import LmdbStore, is_store_url, open_store
from .store._admin import PG_BACKUP_HINT, backup, purge, purge_candidates
from ._replay import replay_history, replay_report

__all__ = ["COMMANDS", "main", "parse_duration", "replay_history", "replay_report"]

COMMANDS = ("backup", "purge", "replay", "export")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """``90``, ``45s``, ``30m``, ``12h``, ``7d``, ``2w`` -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if match is None:
        raise ValueError(f"expected a duration such as 7d, 12h, 30m, 0s, not {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _duration_arg(text: str) -> float:
    """``parse_duration`` for argparse, whose message for a plain ValueError names the function."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m weft_actors", description="operator commands")
    parser.add_argument("--data", default="./weft-data", metavar="DIR|URL", help="data directory or postgresql:// URL (default ./weft-data)")
    commands = parser.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("backup", help="a consistent hot copy of an LMDB store (compacted; pg_dump for PostgreSQL)")
    cmd.add_argument("destination")
    cmd = commands.add_parser("purge", help="remove finished workflows (dry run unless --yes)")
    cmd.add_argument("--status", choices=("completed", "failed", "cancelled", "terminated", "timed_out", "continued"))
    cmd.add_argument("--older-than", type=_duration_arg, help="e.g. 7d, 12h")
    cmd.add_argument("--id", action="append", dest="ids", help="a workflow id (repeatable)")
    cmd.add_argument("--yes", action="store_true", help="really delete")
    cmd = commands.add_parser("replay", help="replay one workflow's history against current code")
    cmd.add_argument("workflow_id", nargs="?", help="a workflow in the store (--data)")
    cmd.add_argument("--history", help="a file written by export, instead of a workflow id (- for stdin)")
    cmd.add_argument("--app", required=True, help="module holding the @workflow functions")
    cmd = commands.add_parser("export", help="write one workflow's history as JSON (for replay --history)")
    cmd.add_argument("workflow_id")
    for sub in commands.choices.values():
        sub.add_argument("--data", default=argparse.SUPPRESS, metavar="DIR|URL", help="data directory or postgresql:// URL")
    return parser


def _open(location: str, **options: Any) -> LmdbStore:
    """The store at ``location``, a directory or a ``postgresql://`` URL (``open_store``; a
    ``PgStore`` has every method these commands call). Callers open it ``readonly`` or with
    ``create=False``: only an engine or a supervisor makes a store."""
    return cast(LmdbStore, open_store(location, **options))


def _run(args: argparse.Namespace, out: Any) -> int:
    if args.command == "backup":
        if is_store_url(args.data):
            raise ValueError(PG_BACKUP_HINT)
        store = LmdbStore(args.data, create=False)
        try:
            size = backup(store, args.destination)
        finally:
            store.close()
        out.write(f"backup of {args.data} written to {args.destination} ({size} bytes)\n")
        return 0
    if args.command == "purge":
        store = _open(args.data, create=False)
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
    if args.command == "export":
        store = _open(args.data, readonly=True)
        try:
            recorded = history.export_history(store, args.workflow_id)
        finally:
            store.close()
        out.write(history.dumps(recorded) + "\n")
        return 0
    if (args.workflow_id is None) == (args.history is None):
        raise ValueError("replay needs a workflow id or --history FILE (one of them)")
    if args.history is not None:
        text = sys.stdin.read() if args.history == "-" else open(args.history, "rb").read()
        recorded = history.loads(text)
    else:
        store = _open(args.data, readonly=True)
        try:
            recorded = history.export_history(store, args.workflow_id)
        finally:
            store.close()
    report = replay_history(recorded, importlib.import_module(args.app), app_name=args.app)
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
    except ImportError as exc:  # --app names a module that cannot be imported: not a usage error
        sys.stderr.write(f"error: import_failed: cannot import the app module {getattr(args, 'app', None)!r}: {exc}\n")
        return 1
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"error: usage: {exc}\n")
        return 2
