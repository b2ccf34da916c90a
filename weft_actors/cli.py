"""``python -m weft_actors``: drive a running supervisor from the shell.

Every command is one ``Client`` call. Values are given and printed as JSON; with ``--json``
the output is exactly one JSON document (for scripts, times as epoch seconds with their ISO
8601 twins: ``created`` and ``created_iso``), otherwise a readable form (times in ISO 8601). A failure
prints ``error: <code>: <message>`` (and a ``hint:`` where one helps) on stderr, or with
``--json`` the document ``{"error": {...}}`` on stdout, and exits 1 (2 for a usage error, 130
when interrupted; a closed pipe ends it quietly, 141). The operator commands (``backup``,
``purge``, ``replay``, ``export``) work on a store (``--data``: a data directory or a
``postgresql://`` URL) and are handed to ``weft_actors.admin``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any, Sequence, TextIO

import zmq.auth

from ._cli_errors import Parser, UsageError, print_error, print_failure, print_usage_error, quiet_broken_pipe
from ._cli_json import json_args as _json_args, json_value as _json_value
from ._cli_output import emit as _emit, iso_times as _iso_times, readable as _readable, table as _table
from ._cli_schedule import add_schedule_commands as _schedule_commands, run_schedule as _run_schedule
from ._cli_start import started
from ._endpoint_text import endpoint_problem
from ._cli_memo import add_memo_filter, memo_filter
from ._cli_stack import add_stack_command, format_stack
from ._cli_shards import add_shards_command, run_shards
from .bus import DEFAULT_ENDPOINT, Client
from .bus._calls import endpoint_list
from .errors import ServerUnavailable, WeftError

__all__ = ["main"]

EXIT_INTERRUPTED = 130  # what a shell reports for a command ended by Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # what a shell reports for a writer whose reader went away (128 + SIGPIPE)
_TIMEOUT_HELP = "seconds to wait for each reply from the supervisor (not for a workflow: result waits without limit unless given its own --timeout)"
_GLOBAL_OPTIONS_WITH_VALUE = ("--data", "--endpoint", "--timeout", "--curve-server-key", "--curve-key")
# Handed to weft_actors.admin (they open the store, not a connection); listed here for --help.
_OPERATOR_COMMANDS = {
    "backup": "write a consistent, compacted copy of a data directory (DEST [--data DIR]; pg_dump for a PostgreSQL store)",
    "purge": "delete finished workflows (--status, --older-than, --id; a dry run unless --yes)",
    "replay": "check a history against new code (ID or --history FILE, --app MODULE)",
    "export": "write a workflow's history as JSON, for replay --history (ID)",
}


def _reply_timeout(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"seconds to wait for each reply, more than 0, not {text!r}")
    return seconds


def _result_wait(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"seconds to wait for the result, more than 0, not {text!r} (leave it out to wait without limit)")
    return seconds


def _endpoint(text: str) -> str:
    """A ZeroMQ endpoint, or several joined by commas (supervisors sharing one store: the
    client fails over between them); a bare ``host:port`` is refused with the fix, not a
    socket error."""
    for endpoint in endpoint_list(text):
        problem = endpoint_problem(endpoint)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
    return text


def _common_options(*, with_timeout: bool) -> argparse.ArgumentParser:
    """The global options again, for after the command name (SUPPRESS keeps the value given
    before it, or the default, when they are absent)."""
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--endpoint", type=_endpoint, help="supervisor front door, or several comma-separated to fail over between (env WEFT_ENDPOINT)")
    common.add_argument("--json", action="store_true", help="print one JSON document")
    if with_timeout:
        common.add_argument("--timeout", type=_reply_timeout, metavar="S", help=_TIMEOUT_HELP)
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
    parser: argparse.ArgumentParser = Parser(prog="python -m weft_actors", description="Client commands for a weft_actors supervisor.")
    parser.add_argument(
        "--endpoint", type=_endpoint, default=os.environ.get("WEFT_ENDPOINT", DEFAULT_ENDPOINT),
        help="supervisor front door, or several comma-separated to fail over between (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", default=False, help="print one JSON document")
    parser.add_argument("--timeout", type=_reply_timeout, default=10.0, metavar="S", help=f"{_TIMEOUT_HELP} (default: %(default)s)")
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
    p = command("result", "wait for a workflow's result (without limit, unless --timeout)", _common_options(with_timeout=False))
    p.add_argument("id")
    p.add_argument("--timeout", dest="wait_timeout", type=_result_wait, default=None, metavar="S", help="give up after S seconds (default: wait without limit)")
    for name, help in (("cancel", "request cancellation"), ("describe", "show a workflow's record and history")):
        command(name, help).add_argument("id")
    p = command("terminate", "end a workflow at once")
    p.add_argument("id")
    reason = p.add_mutually_exclusive_group()
    reason.add_argument("reason_text", nargs="?", metavar="REASON", help="why (recorded)")
    reason.add_argument("--reason", help="the same, as an option")
    p = command("retry", "lift a workflow's quarantine (after fixing its code): it runs again")
    p.add_argument("id")
    p.add_argument("--reason", help="why it may run again (kept in its record, with who lifted it)")
    add_stack_command(command)
    p = command("list", "list workflows")
    p.add_argument("--status")
    p.add_argument("--type")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--cursor")
    add_memo_filter(p)
    command("stats", "server statistics")
    command("ping", "check that the server answers")
    add_shards_command(command)
    p = command("keygen", "write a CURVE key pair")
    p.add_argument("dir")
    p.add_argument("--name", default="client")
    _schedule_commands(command("schedule", "create, list and act on schedules (schedule ACTION --help)"), common)
    for name, help in _OPERATOR_COMMANDS.items():  # parsed by weft_actors.admin (see main)
        commands.add_parser(name, help=help, add_help=False)
    commands.add_parser("check", help="check a store's invariants, as python -m weft_actors.check (--data DIR|URL)", add_help=False)
    return parser


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
    raise ServerUnavailable(f"nothing is listening at {', '.join(refused)}", endpoint=endpoint, listening=False)


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
            _emit(args, out, *started(handle))
        elif command == "schedule":
            _run_schedule(args, out, client)
        elif command == "shards":
            run_shards(args, out, client)
        elif command in ("list", "stats", "ping"):
            if command == "list":
                page = client.list(status=args.status, type=args.type, limit=args.limit, cursor=args.cursor, memo=memo_filter(args))
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
        value = handle.terminate(args.reason if args.reason is not None else args.reason_text)
    elif command == "retry":
        value = handle.lift_quarantine(args.reason)
    elif command == "stack":
        return _emit(args, out, (stack := handle.stack()), format_stack(args.id, stack))
    else:
        value = handle.describe()
    if command in ("signal", "cancel", "terminate", "retry"):
        _emit(args, out, {"ok": True}, "ok")
    else:
        _emit(args, out, value, _readable(_iso_times(value)))


def _first_positional(argv: Sequence[str]) -> str | None:
    """The command name: the first argument that is neither an option nor an option's value."""
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failed, 2 bad usage, 130 interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if _first_positional(argv) in _OPERATOR_COMMANDS:
        from . import admin  # opens the store: not needed by the client commands

        return admin.main(argv)
    if _first_positional(argv) == "check":  # the store checker, by the name people try first
        from . import check

        argv.remove("check")
        return check.main(argv)
    parser = _parser()
    as_json = "--json" in argv
    args: argparse.Namespace | None = None
    try:
        args = parser.parse_args(argv)
        _run(args, sys.stdout)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except UsageError as exc:
        print_usage_error(exc, as_json=as_json)
        return 2
    except SystemExit as exc:  # argparse has printed the help
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:  # Ctrl-C, while waiting for a result say: no traceback
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `... | head`: the reader has all it wanted
        quiet_broken_pipe()
        return EXIT_BROKEN_PIPE
    except WeftError as exc:
        print_error(exc, as_json=as_json, curve=bool(args is not None and args.curve_server_key))
        return 1
    except TimeoutError as exc:
        print_failure("timeout", str(exc), as_json=as_json)
        return 1
    except (ValueError, OSError) as exc:  # bad key file, unwritable keygen dir, ...
        print_failure("usage", str(exc), as_json=as_json)
        return 2
    return 0
