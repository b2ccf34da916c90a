"""``python -m weft_actors``: drive a running supervisor from the shell.

Every command is one ``Client`` call. Values are given and printed as JSON; with ``--json``
the output is exactly one JSON document (for scripts, times as epoch seconds with their ISO
8601 twins: ``created`` and ``created_iso``), otherwise a readable form (times in ISO 8601). A failure
prints ``error: <code>: <message>`` on stderr and exits 1 (2 for a usage error, 130 when
interrupted). The operator commands (``backup``, ``purge``, ``replay``, ``export``) work on a
store (``--data``: a data directory or a ``postgresql://`` URL) and are handed to
``weft_actors.admin``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import json
import os
import socket
import sys
import uuid
from typing import Any, Sequence, TextIO

import zmq.auth

from ._cli_json import json_args as _json_args, json_value as _json_value
from ._schedule_spec import OVERLAP_POLICIES, SCHEDULE_TYPE
from .bus import DEFAULT_ENDPOINT, Client
from .bus._calls import endpoint_list
from .errors import OutcomeUnknown, ServerUnavailable, WeftError

__all__ = ["main"]

EXIT_INTERRUPTED = 130  # what a shell reports for a command ended by Ctrl-C (128 + SIGINT)
_TRANSPORTS = ("tcp://", "ipc://", "inproc://")
_GLOBAL_OPTIONS_WITH_VALUE = ("--data", "--endpoint", "--timeout", "--curve-server-key", "--curve-key")
# Handed to weft_actors.admin (they open the store, not a connection); listed here for --help.
_OPERATOR_COMMANDS = {
    "backup": "write a consistent, compacted copy of a data directory (DEST [--data DIR]; pg_dump for a PostgreSQL store)",
    "purge": "delete finished workflows (--status, --older-than, --id; a dry run unless --yes)",
    "replay": "check a history against new code (ID or --history FILE, --app MODULE)",
    "export": "write a workflow's history as JSON, for replay --history (ID)",
}


def _json_default(value: Any) -> Any:
    """Printable stand-ins for what the codec carries but JSON does not."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (set, frozenset)):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return repr(value)


def _dumps(value: Any, *, indent: int | None = None) -> str:
    # Non-string keys (ints, tuples) are made strings rather than failing the whole output.
    return json.dumps(_string_keys(value), default=_json_default, indent=indent, ensure_ascii=False)


def _string_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k if isinstance(k, str) else _dumps(k): _string_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_string_keys(v) for v in value]
    return value


def _reply_timeout(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"seconds to wait for each reply, more than 0, not {text!r}")
    return seconds


def _endpoint(text: str) -> str:
    """A ZeroMQ endpoint, or several joined by commas (supervisors sharing one store: the
    client fails over between them); a bare ``host:port`` is refused with the fix, not a
    socket error."""
    for endpoint in endpoint_list(text):
        if not endpoint.startswith(_TRANSPORTS):
            raise argparse.ArgumentTypeError(f"{endpoint!r} names no transport: write tcp://{endpoint.split('://')[-1]} (a ZeroMQ endpoint)")
        if endpoint.startswith("tcp://") and "," in endpoint:
            raise argparse.ArgumentTypeError(f"{endpoint!r}: name each of several endpoints with its transport, e.g. tcp://a:5555,tcp://b:5555")
    return text


def _common_options(*, with_timeout: bool) -> argparse.ArgumentParser:
    """The global options again, for after the command name (SUPPRESS keeps the value given
    before it, or the default, when they are absent)."""
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--endpoint", type=_endpoint, help="supervisor front door, or several comma-separated to fail over between (env WEFT_ENDPOINT)")
    common.add_argument("--json", action="store_true", help="print one JSON document")
    if with_timeout:
        common.add_argument("--timeout", type=_reply_timeout, metavar="S", help="seconds to wait for each reply")
    common.add_argument("--curve-server-key", metavar="FILE", help="server public key file (enables CURVE)")
    common.add_argument("--curve-key", metavar="FILE", help="client secret key file (.key_secret)")
    return common


def _start_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("workflow")
    p.add_argument(
        "args", nargs="?", type=_json_args, default=(), metavar="ARGS_JSON",
        help="JSON array of the workflow's arguments, or one JSON value (e.g. '[\"world\"]')",
    )
    p.add_argument("--id", help="workflow id (generated if absent)")
    p.add_argument("--if-exists", choices=("error", "return", "start_new"), default="error", help="when the id is taken (default: %(default)s)")
    p.add_argument("--start-delay", type=float, metavar="S")
    p.add_argument("--start-at", type=float, metavar="EPOCH_S")
    p.add_argument("--execution-timeout", type=float, metavar="S")
    p.add_argument("--memo", type=_json_value, metavar="JSON")
    p.add_argument("--priority", type=int, metavar="N", help="place in the queue of a type with concurrency: -128 to 127, higher first")


def _parser() -> argparse.ArgumentParser:
    common = _common_options(with_timeout=True)
    parser = argparse.ArgumentParser(prog="python -m weft_actors", description="Client commands for a weft_actors supervisor.")
    parser.add_argument(
        "--endpoint", type=_endpoint, default=os.environ.get("WEFT_ENDPOINT", DEFAULT_ENDPOINT),
        help="supervisor front door, or several comma-separated to fail over between (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", default=False, help="print one JSON document")
    parser.add_argument("--timeout", type=_reply_timeout, default=10.0, metavar="S", help="seconds to wait for each reply (default: %(default)s)")
    parser.add_argument("--curve-server-key", metavar="FILE", default=None, help="server public key file (enables CURVE)")
    parser.add_argument("--curve-key", metavar="FILE", default=None, help="client secret key file (.key_secret)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, parent: argparse.ArgumentParser = common) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, parents=[parent])

    _start_options(command("start", "start a workflow"))
    p = command("signal-with-start", "signal a workflow, starting it first if it does not exist (one step)")
    _start_options(p)
    p.add_argument("--signal", required=True, metavar="NAME", help="the signal to send")
    p.add_argument("--payload", type=_json_value, default=None, metavar="JSON", help="the signal's payload")
    p = command("signal", "send a signal")
    p.add_argument("id")
    p.add_argument("name")
    p.add_argument("payload", nargs="?", type=_json_value, default=None, metavar="PAYLOAD_JSON")
    p = command("query", "run a query")
    p.add_argument("id")
    p.add_argument("name")
    p.add_argument("args", nargs="?", type=_json_args, default=(), metavar="ARGS_JSON")
    p = command("update", "run an update")
    p.add_argument("id")
    p.add_argument("name")
    p.add_argument("args", nargs="?", type=_json_args, default=(), metavar="ARGS_JSON")
    p.add_argument("--request-id", help="idempotency key (generated if absent)")
    # After `result`, --timeout is how long to wait for the result (each reply waits that long too).
    p = command("result", "wait for a workflow's result", _common_options(with_timeout=False))
    p.add_argument("id")
    p.add_argument("--timeout", dest="wait_timeout", type=float, default=None, metavar="S", help="give up after S seconds")
    for name, help in (("cancel", "request cancellation"), ("describe", "show a workflow's record and history")):
        command(name, help).add_argument("id")
    p = command("terminate", "end a workflow at once")
    p.add_argument("id")
    p.add_argument("--reason")
    p = command("retry", "lift a workflow's quarantine (after fixing its code): it runs again")
    p.add_argument("id")
    p.add_argument("--reason", help="why it may run again (kept in its record, with who lifted it)")
    p = command("list", "list workflows")
    p.add_argument("--status")
    p.add_argument("--type")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--cursor")
    command("stats", "server statistics")
    command("ping", "check that the server answers")
    p = command("keygen", "write a CURVE key pair")
    p.add_argument("dir")
    p.add_argument("--name", default="client")
    _schedule_commands(command("schedule", "create, list and act on schedules (schedule ACTION --help)"), common)
    for name, help in _OPERATOR_COMMANDS.items():  # parsed by weft_actors.admin (see main)
        commands.add_parser(name, help=help, add_help=False)
    return parser


def _schedule_commands(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("create", help="create a schedule", parents=[common])
    p.add_argument("id", help="the schedule id (its runs are ID/<fire time ISO>)")
    p.add_argument("workflow")
    p.add_argument("args", nargs="?", type=_json_args, default=(), metavar="ARGS_JSON", help="JSON array of the workflow's arguments")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="5 fields (or 6, seconds first), e.g. '0 9 * * mon-fri'")
    when.add_argument("--every", type=float, metavar="S", help="an interval in seconds")
    p.add_argument("--offset", type=float, default=0.0, metavar="S", help="shift of --every's grid (default 0)")
    p.add_argument("--timezone", default="UTC", help="zoneinfo name the cron string is read in (default UTC)")
    p.add_argument("--start", type=float, metavar="EPOCH_S", help="no fire before this")
    p.add_argument("--end", type=float, metavar="EPOCH_S", help="no fire after this")
    p.add_argument("--jitter", type=float, default=0.0, metavar="S", help="delay each fire by up to S seconds")
    p.add_argument("--overlap", choices=OVERLAP_POLICIES, default="skip", help="when the previous run still runs (default: %(default)s)")
    p.add_argument("--catchup-window", type=float, default=60.0, metavar="S", help="missed fires younger than this still start (default 60)")
    p.add_argument("--paused", action="store_true", help="create it paused")
    p.add_argument("--note")
    actions.add_parser("list", help="list schedules", parents=[common]).add_argument("--limit", type=int, default=100)
    for name, help in (("describe", "next fire times, recent runs, counts"), ("trigger", "fire now"), ("delete", "fire no more")):
        actions.add_parser(name, help=help, parents=[common]).add_argument("id")
    for name, help in (("pause", "stop firing until unpaused"), ("unpause", "fire again (what fell due meanwhile is not caught up)")):
        p = actions.add_parser(name, help=help, parents=[common])
        p.add_argument("id")
        p.add_argument("--note")
    p = actions.add_parser("backfill", help="start every fire time in [START, END] not started yet", parents=[common])
    p.add_argument("id")
    p.add_argument("start", type=float, metavar="START_EPOCH_S")
    p.add_argument("end", type=float, metavar="END_EPOCH_S")


def _run_schedule(args: argparse.Namespace, out: TextIO, client: Client) -> None:
    action = args.action
    if action == "create":
        spec = {"cron": args.cron, "every": args.every, "offset": args.offset, "timezone": args.timezone, "start": args.start, "end": args.end, "jitter": args.jitter}
        handle = client.create_schedule(
            args.id, args.workflow, *args.args, spec=spec, overlap=args.overlap, catchup_window=args.catchup_window, paused=args.paused, note=args.note,
        )
        _emit(args, out, {"id": handle.id}, f"schedule {handle.id} created")
        return
    if action == "list":
        page = client.list(type=SCHEDULE_TYPE, limit=args.limit)
        _emit(args, out, page, _table(page))
        return
    schedule = client.get_schedule(args.id)
    if action == "describe":
        value = schedule.describe()
        _emit(args, out, value, _readable(_iso_times(value)))
        return
    if action in ("pause", "unpause"):
        getattr(schedule, action)(args.note)
    elif action == "backfill":
        schedule.backfill(args.start, args.end)
    else:
        getattr(schedule, action)()
    _emit(args, out, {"ok": True}, "ok")


def _client(args: argparse.Namespace) -> Client:
    _check_listening(args.endpoint, args.timeout)
    return Client(
        args.endpoint,
        timeout=args.timeout,
        curve_server_key=args.curve_server_key,
        curve_secret_key=args.curve_key,
    )


def _tcp_address(endpoint: str) -> tuple[str, int] | None:
    """``(host, port)`` of a plain ``tcp://host:port`` endpoint; None for anything else."""
    if not endpoint.startswith("tcp://"):
        return None
    host, sep, port = endpoint[len("tcp://"):].rpartition(":")
    if not sep or not port.isdigit() or ";" in host or host in ("", "*"):
        return None
    return host.strip("[]"), int(port)


def _check_listening(endpoint: str, timeout: float) -> None:
    """Fail at once when nothing accepts connections at ``endpoint`` (at any of several): ZeroMQ
    would otherwise retry quietly until the reply timeout (for ``result``, on top of the wait)."""
    refused = []
    for one in endpoint_list(endpoint):
        reason = _not_listening(one, timeout)
        if reason is None:
            return
        refused.append(f"{one} ({reason})")
    raise ServerUnavailable(f"nothing is listening at {', '.join(refused)}", endpoint=endpoint)


def _not_listening(endpoint: str, timeout: float) -> str | None:
    """Why nothing accepts a TCP connection at ``endpoint``; None if something does (or it is
    not a plain TCP endpoint, which is not checked)."""
    address = _tcp_address(endpoint)
    if address is None:
        return None
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    return None


def _start_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "id": args.id, "if_exists": args.if_exists, "start_delay": args.start_delay, "start_at": args.start_at,
        "execution_timeout": args.execution_timeout, "memo": args.memo, "priority": args.priority,
    }


def _run(args: argparse.Namespace, out: TextIO) -> None:
    """Run one command and print its output."""
    command = args.command
    if command == "keygen":
        os.makedirs(args.dir, exist_ok=True)
        public, secret = zmq.auth.create_certificates(args.dir, args.name)
        _emit(args, out, {"public": public, "secret": secret}, f"public key: {public}\nsecret key: {secret}")
        return
    with _client(args) as client:
        if command in ("start", "signal-with-start"):
            if command == "start":
                handle = client.start(args.workflow, *args.args, **_start_kwargs(args))
            else:
                handle = client.signal_with_start(args.workflow, *args.args, signal=args.signal, payload=args.payload, **_start_kwargs(args))
            _emit(args, out, {"id": handle.id, "run_id": handle.run_id}, f"{handle.id} (run {handle.run_id})")
        elif command == "schedule":
            _run_schedule(args, out, client)
        elif command in ("list", "stats", "ping"):
            if command == "list":
                page = client.list(status=args.status, type=args.type, limit=args.limit, cursor=args.cursor)
                _emit(args, out, page, _table(page))
            else:
                value = getattr(client, command)()
                _emit(args, out, value, _readable(value))
        else:
            _run_on_handle(args, out, client.get_handle(args.id))


def _run_on_handle(args: argparse.Namespace, out: TextIO, handle: Any) -> None:
    command = args.command
    if command == "signal":
        value = handle.signal(args.name, args.payload)
    elif command == "query":
        value = handle.query(args.name, *args.args)
    elif command == "update":
        value = handle.update(args.name, *args.args, request_id=args.request_id)
    elif command == "result":
        value = handle.result(timeout=args.wait_timeout)
    elif command == "cancel":
        value = handle.cancel()
    elif command == "terminate":
        value = handle.terminate(args.reason)
    elif command == "retry":
        value = handle.lift_quarantine(args.reason)
    else:
        value = handle.describe()
    if command in ("signal", "cancel", "terminate", "retry"):
        _emit(args, out, {"ok": True}, "ok")
    else:
        _emit(args, out, value, _readable(_iso_times(value)))


def _readable(value: Any) -> str:
    return value if isinstance(value, str) else _dumps(value, indent=2)


def _iso_times(value: Any) -> Any:
    """``value`` for a person: each time that has an ISO 8601 twin (``created`` beside
    ``created_iso``) shown as that text, in its place, and the twin dropped."""
    if isinstance(value, list):
        return [_iso_times(item) for item in value]
    if not isinstance(value, dict):
        return value
    shown = {}
    for key, item in value.items():
        if isinstance(key, str) and key.endswith("_iso") and key[:-4] in value:
            continue
        twin = f"{key}_iso" if isinstance(key, str) else None
        shown[key] = value[twin] if twin in value else _iso_times(item)
    return shown


def _table(page: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [("ID", "TYPE", "STATUS", "UPDATED")]
    for item in page.get("items") or []:
        item = _iso_times(item)
        rows.append(tuple(_readable(item.get(key)) if item.get(key) is not None else "-" for key in ("id", "type", "status", "updated")))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    if page.get("cursor"):
        lines.append(f"next: --cursor {page['cursor']}")
    return "\n".join(lines)


def _emit(args: argparse.Namespace, out: TextIO, value: Any, readable: str) -> None:
    print(_dumps(value) if args.json else readable, file=out)


def _first_positional(argv: Sequence[str]) -> str | None:
    """The command name: the first argument that is neither an option nor an option's value."""
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def _print_error(exc: WeftError) -> None:
    print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
    if isinstance(exc, ServerUnavailable) and not isinstance(exc, OutcomeUnknown):
        print(
            "hint: is a supervisor running there? Start one with `python -m weft_actors.supervisor`, "
            "or name its endpoint with --endpoint (or WEFT_ENDPOINT), e.g. tcp://127.0.0.1:5555",
            file=sys.stderr,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failed, 2 bad usage, 130 interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if _first_positional(argv) in _OPERATOR_COMMANDS:
        from . import admin  # opens the store: not needed by the client commands

        return admin.main(argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        _run(args, sys.stdout)
    except SystemExit as exc:  # argparse has printed the usage error (or the help)
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:  # Ctrl-C, while waiting for a result say: no traceback
        return EXIT_INTERRUPTED
    except WeftError as exc:
        _print_error(exc)
        return 1
    except TimeoutError as exc:
        print(f"error: timeout: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:  # bad key file, unwritable keygen dir, ...
        print(f"error: usage: {exc}", file=sys.stderr)
        return 2
    return 0
