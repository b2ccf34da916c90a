"""``python -m weft_actors.supervisor``: run the engine's shards under one supervisor.

Exit codes: 0 after a clean drain (SIGINT/SIGTERM); 1 when it cannot start (bad options,
endpoint in use, store refused); 2 for command-line usage errors; 3 when shards died more
often than the restart intensity allows.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import NoReturn

from .._endpoint_text import endpoint_problem
from ..errors import WeftError
from ..shard import validate_timing
from ..store import is_store_url
from ._config import SupervisorConfig, configure_logging
from ._console import H11_MISSING, parse_http
from ._supervisor import EXIT_STARTUP, Supervisor

log = logging.getLogger("weft_actors.supervisor")


DESCRIPTION = "Run the engine's shards under one supervisor (exit 0 after a clean drain, 1 when it cannot start, 2 for a usage error, 3 when shards died too often)."
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class _HelpWithDefaults(argparse.HelpFormatter):
    """Every flag's help ends with its default, unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help = action.help or ""
        if "default" in help or action.default is argparse.SUPPRESS or not action.option_strings:
            return help
        if action.default is None or action.default is False:
            return f"{help} (default: {'off' if action.default is False else 'none'})"
        return f"{help} (default: %(default)s)"


class _OneLineErrors(argparse.ArgumentParser):
    """A usage error is one line that names the flag, not the fifty-line usage above it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def _bind_endpoint(text: str) -> str:
    """``--bind``: the client's ``--endpoint`` check (a bare ``host:port`` names no transport)."""
    problem = endpoint_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _have_h11() -> bool:
    """Whether the console's HTTP layer can be imported (the ``console`` extra)."""
    try:
        import h11  # noqa: F401
    except ImportError:
        return False
    return True


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineErrors(prog="python -m weft_actors.supervisor", description=DESCRIPTION, formatter_class=_HelpWithDefaults)
    parser.add_argument("--shards", type=int, metavar="N", default=os.cpu_count() or 1, help="shard processes (default: CPU count)")
    parser.add_argument("--app", metavar="MODULE", default="weft_actors.examples", help="module holding the @workflow functions (default: the bundled example app, %(default)s)")
    parser.add_argument("--data", "--store", dest="data", metavar="DIR|URL", default="./weft-data", help="the store: a data directory (LMDB), or a postgresql:// URL that supervisors on several hosts share")
    parser.add_argument("--bind", type=_bind_endpoint, metavar="ENDPOINT", default="tcp://127.0.0.1:5555", help="client endpoint")
    parser.add_argument("--heartbeat", type=float, default=0.5, metavar="S", help="seconds between a shard's lease renewals")
    parser.add_argument("--ttl", type=float, default=3.0, metavar="S", help="seconds a lease lasts: a shard silent for this long loses its workflows to the others")
    parser.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO", help="least severe level logged")
    parser.add_argument("--log-json", action="store_true", help="log one JSON object per line")
    parser.add_argument("--curve-secret-key", metavar="FILE", help="server secret key file (enables CURVE)")
    parser.add_argument("--curve-authorized-keys", metavar="DIR", help="directory of authorized client public keys (full access)")
    parser.add_argument(
        "--curve-readonly-keys",
        metavar="DIR",
        help="directory of client public keys that may only read (result, query, describe, list, stats)",
    )
    parser.add_argument(
        "--insecure-bind",
        action="store_true",
        help="allow a non-loopback --bind without CURVE (any client that connects has full access)",
    )
    parser.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics (and /healthz) on 127.0.0.1:PORT (default: off; the --http console serves them too)")
    parser.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        help="serve the web console, its JSON API, /metrics and /healthz here (default: off; HOST defaults to 127.0.0.1; "
        "a non-loopback HOST needs --http-cert or --insecure-http, and every request there a token)",
    )
    parser.add_argument("--http-token-file", metavar="FILE", help="read the console's action token from FILE (default: a random token, logged at start)")
    console = parser.add_argument_group("web console security and limits (docs/operations.md, Web console)")
    console.add_argument("--http-read-token-file", metavar="FILE", help="a second token, read from FILE, that may read the console but not act")
    console.add_argument("--http-cert", metavar="PEM", help="serve the console over TLS with this certificate (chain)")
    console.add_argument("--http-key", metavar="PEM", help="the private key of --http-cert (default: in the --http-cert file)")
    console.add_argument("--insecure-http", action="store_true", help="allow a non-loopback --http HOST without TLS (a token is still needed)")
    console.add_argument("--http-host", action="append", default=[], metavar="NAME", help="a name the console answers to as Host: (repeatable; IP literals and localhost always)")
    console.add_argument("--http-max-connections", type=int, default=64, metavar="N", help="console connections open at once; more get 503")
    console.add_argument("--http-timeout", type=float, default=10.0, metavar="S", help="seconds a console connection gets to send a whole request; one idle this long is closed")
    parser.add_argument("--no-hints", action="store_true", help="disable the hint bus (polling only; default: hints on)")
    parser.add_argument(
        "--routing",
        choices=("owner", "round-robin"),
        default="owner",
        help="send requests to the workflow's owner (default) or to any shard (shows that any shard answers correctly)",
    )
    parser.add_argument("--payload-limit", type=int, default=1 << 20, metavar="B", help="bytes per argument/signal/update payload (default 1 MiB)")
    parser.add_argument("--retention", type=float, default=7 * 86400.0, metavar="S", help="seconds a finished workflow keeps its history (default 7 days)")
    parser.add_argument("--drain-timeout", type=float, default=10.0, metavar="S", help="seconds shards get to drain on SIGTERM before they are killed, beyond the --handoff-grace of a shard handing off to another host")
    parser.add_argument("--handoff-grace", type=float, default=30.0, metavar="S", help="seconds a shard handing off (SIGUSR1, or SIGTERM with a live peer host) lets its running activities finish")
    parser.add_argument("--ready-timeout", type=float, default=5.0, metavar="S", help="seconds a request waits for a shard to be ready (at start, or while every shard restarts) before it fails (default 5)")
    parser.add_argument("--restart-limit", type=int, default=5, metavar="N", help="restarts allowed per --restart-window; beyond them the supervisor exits 3")
    parser.add_argument("--restart-window", type=float, default=30.0, metavar="S", help="seconds over which --restart-limit counts restarts")
    limits = parser.add_argument_group("limits per shard (LimitExceeded or Overloaded beyond them; activities queue instead)")
    limits.add_argument("--max-live-actors", type=int, default=100_000, metavar="N", help="actors kept in memory; parked ones beyond are evicted")
    limits.add_argument("--max-active-workflows", type=int, metavar="N", help="starts refused beyond this many busy actors (default: max(200000, 2 x live))")
    limits.add_argument("--max-inbox", type=int, default=10_000, metavar="N", help="signals and updates pending per workflow")
    limits.add_argument("--max-inflight-activities", type=int, default=1000, metavar="N", help="activity attempts running at once; more wait in FIFO order")
    limits.add_argument("--max-running", type=int, default=10_000, metavar="N", help="workflows in flight (not parked); starts beyond are refused at once with Overloaded (default 10000)")
    limits.add_argument("--max-queued-starts", type=int, default=1000, metavar="N", help="starts a shard holds unanswered; more for it are refused at once with Overloaded (default 1000)")
    limits.add_argument("--max-intake-mb", type=int, default=512, metavar="MB", help="MiB that clients' unfinished multi-part messages may grow the supervisor by before the connection sending the most is cut (0: never; default 512)")
    limits.add_argument("--max-queued-requests", type=int, default=20_000, metavar="N", help="requests a shard holds unanswered; more for it are refused at once with Overloaded (default 20000)")
    poison = parser.add_argument_group("poison workflows")
    poison.add_argument("--quarantine-after", type=int, default=1, metavar="N", help="park a workflow after N of its owners were lost without progress to a stall or death its own code caused (default 1: at the first)")
    poison.add_argument("--stall-threshold", type=float, default=None, metavar="S", help="log a loop stall (with the workflow and activity blocking it) after S seconds (default: the lesser of 1 and ttl/3)")
    return parser


def parse_args(argv: list[str] | None) -> SupervisorConfig:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.curve_readonly_keys and not args.curve_secret_key:
        parser.error("--curve-readonly-keys needs --curve-secret-key")
    console_flags = (args.http_token_file, args.http_read_token_file, args.http_cert, args.http_key, args.insecure_http, args.http_host)
    if any(console_flags) and not args.http:
        parser.error("--http-token-file, --http-read-token-file, --http-cert, --http-key, --insecure-http and --http-host need --http")
    if args.http and not _have_h11():
        parser.error(H11_MISSING)
    if args.http_key and not args.http_cert:
        parser.error("--http-key needs --http-cert")
    if args.http_max_connections < 1 or not args.http_timeout > 0:
        parser.error("--http-max-connections must be at least 1 and --http-timeout > 0")
    if args.http:
        try:
            parse_http(args.http)
        except ValueError as exc:
            parser.error(str(exc))
    if args.shards < 1:
        parser.error("--shards must be at least 1")
    if args.ready_timeout < 0 or args.handoff_grace < 0:
        parser.error("--ready-timeout and --handoff-grace must not be negative")
    try:
        validate_timing(args.heartbeat, args.ttl)
    except ValueError as exc:
        parser.error(str(exc))
    if min(args.max_live_actors, args.max_inbox, args.max_inflight_activities, args.max_running, args.max_queued_requests, args.max_queued_starts) < 1:
        parser.error("--max-live-actors, --max-inbox, --max-inflight-activities, --max-running and --max-queued-requests must be at least 1")
    if args.max_intake_mb < 0:
        parser.error("--max-intake-mb must be 0 (off) or more")
    if args.quarantine_after < 1 or (args.stall_threshold is not None and not args.stall_threshold > 0):
        parser.error("--quarantine-after must be at least 1 and --stall-threshold > 0")
    if args.max_active_workflows is not None and args.max_active_workflows <= args.max_live_actors:
        parser.error("--max-active-workflows must exceed --max-live-actors (parked actors are evicted down to it)")
    return SupervisorConfig(
        shards=args.shards,
        app=args.app,
        data_dir=args.data if is_store_url(args.data) else os.path.abspath(args.data),
        bind=args.bind,
        heartbeat=args.heartbeat,
        ttl=args.ttl,
        log_level=args.log_level,
        log_json=args.log_json,
        curve_secret_key=args.curve_secret_key,
        curve_authorized_keys=args.curve_authorized_keys,
        curve_readonly_keys=args.curve_readonly_keys,
        insecure_bind=args.insecure_bind,
        metrics_port=args.metrics_port,
        http=args.http,
        http_token_file=args.http_token_file,
        http_read_token_file=args.http_read_token_file,
        http_cert=args.http_cert,
        http_key=args.http_key,
        insecure_http=args.insecure_http,
        http_hosts=tuple(args.http_host),
        http_max_connections=args.http_max_connections,
        http_timeout=args.http_timeout,
        hints=not args.no_hints,
        restart_limit=args.restart_limit,
        restart_window=args.restart_window,
        routing=args.routing,
        max_live_actors=args.max_live_actors,
        max_active_workflows=args.max_active_workflows,
        max_inbox=args.max_inbox,
        max_inflight_activities=args.max_inflight_activities,
        max_running=args.max_running,
        max_queued_requests=args.max_queued_requests,
        max_queued_starts=args.max_queued_starts,
        max_intake_bytes=args.max_intake_mb << 20,
        quarantine_after=args.quarantine_after,
        stall_threshold=args.stall_threshold,
        payload_limit=args.payload_limit,
        retention=args.retention,
        drain_timeout=args.drain_timeout,
        handoff_grace=args.handoff_grace,
        ready_timeout=args.ready_timeout,
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    configure_logging(config.log_level, config.log_json, "supervisor")
    try:
        __import__(config.app)
    except Exception as exc:  # ImportError, but also a SyntaxError or any error at import
        log.error("cannot import the app module %r: %s", config.app, exc)
        return EXIT_STARTUP
    try:
        return Supervisor(config).run()
    except WeftError as exc:
        log.error("cannot start: %s: %s", exc.code, exc)
        return EXIT_STARTUP


if __name__ == "__main__":
    sys.exit(main())
