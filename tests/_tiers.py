"""The everyday tier of the suite: ``pytest -m "not slow"`` leaves out the files below.

Each was measured (pytest's ``--durations``, a CI run on a 2-core machine) at more than 8 s
in all or more than 0.8 s a test: real supervisors and shards, two-host and fault runs on
PostgreSQL, the browser, the chaos and simulation budgets, the docs' examples. What is left
covers every package in about two minutes; the full suite (the README's test command) runs
everything, as CI does. A new file that starts real processes or waits out real leases
belongs here. ``test_tiers`` keeps the list true (every entry names a file that exists)."""

from __future__ import annotations

SLOW_FILES = frozenset(
    {
        "chaos/test_chaos.py",
        "chaos/test_chaos_postgres.py",
        "console/test_api.py",
        "console/test_browser.py",
        "console/test_browser_security.py",
        "console/test_connections.py",
        "console/test_list_pages.py",
        "console/test_security.py",
        "shard/test_bounded_leftovers.py",
        "shard/test_cancel_reentry.py",
        "shard/test_eviction.py",
        "shard/test_on_loop.py",
        "shard/test_ownership_processes.py",
        "shard/test_pg_down_no_spin.py",
        "shard/test_pg_heartbeat_off_loop.py",
        "shard/test_pg_outcome_unknown_redrive.py",
        "shard/test_recovery.py",
        "shard/test_semantics_network.py",
        "shard/test_takeover_backlog.py",
        "shard/test_watchdog.py",
        "shard/test_watchdog_pg_wait.py",
        "sim/test_sim.py",
        "store/test_loop_turning.py",
        "store/test_pg_ambiguous_commit.py",
        "store/test_pg_clock_after_cut.py",
        "store/test_pg_commit_shutdown.py",
        "store/test_pg_cut_off.py",
        "store/test_pg_round_trips.py",
        "store/test_pg_server_clock.py",
        "store/test_pg_server_restart_leases.py",
        "store/test_pg_stalled_writer.py",
        "store/test_pg_stopped_backend.py",
        "store/test_pg_taker_after_cut.py",
        "store/test_store_flow.py",
        "store/test_store_visibility.py",
        "supervisor/test_access.py",
        "supervisor/test_blame_processes.py",
        "supervisor/test_blame_two_hosts_postgres.py",
        "supervisor/test_client_failover.py",
        "supervisor/test_flow_processes.py",
        "supervisor/test_hung_shards.py",
        "supervisor/test_json_logs.py",
        "supervisor/test_mixed_apps_processes.py",
        "supervisor/test_outcome_unknown_processes.py",
        "supervisor/test_part_cap.py",
        "supervisor/test_pg_faults_bench.py",
        "supervisor/test_pg_judgment_cut.py",
        "supervisor/test_pg_stopped_own_backend.py",
        "supervisor/test_postgres_cut_off_host.py",
        "supervisor/test_postgres_outages.py",
        "supervisor/test_quarantine_processes.py",
        "supervisor/test_schedule_control.py",
        "supervisor/test_schedule_processes.py",
        "supervisor/test_slow_clients.py",
        "supervisor/test_supervisor.py",
        "supervisor/test_two_hosts_postgres.py",
        "supervisor/test_unwritable_store.py",
        "supervisor/test_workflow_metrics.py",
        "test_activity_limit_threads.py",
        "test_admin.py",
        "test_bench_smoke.py",
        "test_docs.py",
        "test_operator_tools_postgres.py",
        "test_overload.py",
        "test_refused_outcomes.py",
        "test_storage_full.py",
        "test_typing.py",
        "workflow/test_combinators_property.py",
    }
)
"""Paths under ``tests/``."""
