"""What a supervisor tells each shard it spawns: its ``ShardConfig``.

Its own piece because it is the one list of which supervisor settings a shard process gets
(everything else stays in the supervisor) and of the endpoints the supervisor made for it: a
new engine setting is passed down here, next to the others, and nowhere else.
"""

from __future__ import annotations

from ._config import ShardConfig, SupervisorConfig

__all__ = ["shard_config"]


def shard_config(
    config: SupervisorConfig, slot: int, backend: str, hints_publish: str, hints_subscribe: str, direct_bind: str | None
) -> ShardConfig:
    """The settings of the shard in ``slot``: the supervisor's own, the front door's shard side
    (``backend``), the hint bus, and where it binds its socket for direct clients (if any)."""
    return ShardConfig(
        slot=slot,
        app=config.app,
        data_dir=config.data_dir,
        backend=backend,
        hints_publish=hints_publish,
        hints_subscribe=hints_subscribe,
        heartbeat=config.heartbeat,
        ttl=config.ttl,
        log_level=config.log_level,
        log_json=config.log_json,
        hints=config.hints,
        payload_limit=config.payload_limit,
        retention=config.retention,
        max_live_actors=config.max_live_actors,
        max_active_workflows=config.max_active_workflows,
        max_inbox=config.max_inbox,
        max_inflight_activities=config.max_inflight_activities,
        quarantine_after=config.quarantine_after,
        stall_threshold=config.stall_threshold,
        max_running=config.max_running,
        max_queued_requests=config.max_queued_requests,
        direct_bind=direct_bind,
    )
