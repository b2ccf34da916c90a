"""The floor under engine_throughput.py: the gets, puts and deletes a three-step workflow's four
commits make (create and claim, the first two outcomes, the last outcome with the finish),
in the real environment and key layout, with none of the engine around them; and the asyncio
its callers cost.

    python bench/store_floor.py --workflows 20000

Prints one JSON line: workflows, steps, and µs per workflow for the create commit, the
outcome commits before the last (all of them), and the last commit (the last outcome and the
finish: the engine ends a run in its last outcome's commit), each in one transaction of all
workflows with its fsync, keys built and records packed as the store does; and their sum
(`floor_us_per_workflow`); and `harness_us_per_workflow`: a gather of N tasks that each await
two futures, as engine_throughput.py's callers await ``start`` and ``result``. What
engine_throughput.py spends per workflow above both is the engine's own Python.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import uvloop

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import report, scratch_dir  # noqa: E402
from weft_actors.codec import pack_record  # noqa: E402
from weft_actors.shard._validate import new_id  # noqa: E402
from weft_actors.store._env import close_environment, open_environment  # noqa: E402
from weft_actors.store._keys import (  # noqa: E402
    by_engine_key,
    expiring_key,
    holder_value,
    op_key,
    visibility_key,
    visibility_value,
)

_WF_TYPE = "three_steps"


def _record(wid: str, run_id: str, now: float, status: str) -> bytes:
    """A workflow record shaped like the engine's (same fields, small values)."""
    return pack_record(
        {"type": _WF_TYPE, "args": b"\x91\x01", "status": status, "run_id": run_id, "created": now, "updated": now,
         "memo": None, "parent": None, "start_at": None, "deadline": None, "result": None, "error": None}
    )


def _op(seq: int) -> bytes:
    return pack_record({"kind": "activity", "name": "step", "t": seq + 1, "ok": b"\x02", "attempts": 1})


def measure(workflows: int, data_dir: str, steps: int = 3) -> dict:
    env, dbs = open_environment(data_dir)
    try:
        engine_raw = bytes(16)
        ids = [(new_id(), new_id()) for _ in range(workflows)]
        now = time.time()
        timings: dict[str, float] = {}

        def commit(kind: str, body) -> None:
            started = time.perf_counter()
            with env.begin(write=True) as txn:
                for wid, run_id in ids:
                    body(txn, wid, wid.encode(), run_id)
            timings[kind] = timings.get(kind, 0.0) + time.perf_counter() - started

        def create(txn, wid, raw, run_id):
            txn.get(raw, db=dbs.workflows)
            txn.get(raw, db=dbs.claim_epoch)
            txn.put(raw, (1).to_bytes(8, "big"), db=dbs.claim_epoch)
            txn.put(raw, holder_value(engine_raw, 1, now), db=dbs.claim_holder)
            txn.put(by_engine_key(engine_raw, wid), b"", db=dbs.by_engine)
            txn.put(raw, _record(wid, run_id, now, "running"), db=dbs.workflows)
            txn.put(visibility_key("running", _WF_TYPE, wid), visibility_value(now), db=dbs.visibility)

        def outcome(seq):
            def step(txn, wid, raw, run_id):
                txn.get(raw, db=dbs.claim_holder)
                txn.put(op_key(wid, run_id, seq), _op(seq), db=dbs.ops)
            return step

        def finish(txn, wid, raw, run_id):  # the last outcome, and the ending with it
            txn.get(raw, db=dbs.claim_holder)
            txn.put(op_key(wid, run_id, steps - 1), _op(steps - 1), db=dbs.ops)
            txn.get(raw, db=dbs.workflows)
            txn.delete(raw, db=dbs.claim_holder)
            txn.delete(by_engine_key(engine_raw, wid), db=dbs.by_engine)
            txn.delete(visibility_key("running", _WF_TYPE, wid), db=dbs.visibility)
            txn.put(visibility_key("completed", _WF_TYPE, wid), visibility_value(now), db=dbs.visibility)
            txn.put(expiring_key(now, wid), b"", db=dbs.expiring)
            txn.put(raw, _record(wid, run_id, now, "completed"), db=dbs.workflows)

        commit("create", create)
        timings["outcome"] = 0.0
        for seq in range(steps - 1):
            commit("outcome", outcome(seq))
        commit("finish", finish)
    finally:
        close_environment(data_dir)
    per = {kind: round(seconds / workflows * 1e6, 2) for kind, seconds in timings.items()}
    return {
        "workflows": workflows,
        "steps": steps,
        "create_us": per["create"],
        "outcomes_us": per["outcome"],
        "finish_us": per["finish"],
        "floor_us_per_workflow": round(sum(timings.values()) / workflows * 1e6, 2),
    }


async def _callers(workflows: int) -> float:
    """µs per caller of ``gather`` over N tasks that each await two futures set by the loop."""
    loop = asyncio.get_running_loop()

    async def one(i: int) -> int:
        for _ in range(2):
            future = loop.create_future()
            loop.call_soon(future.set_result, i)
            await future
        return i

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(workflows)))
    return (time.perf_counter() - started) / workflows * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=20_000)
    args = parser.parse_args()
    with scratch_dir(prefix="weft-floor-") as path:
        result = measure(args.workflows, path)
    result["harness_us_per_workflow"] = round(uvloop.run(_callers(args.workflows)), 2)
    report(result)


if __name__ == "__main__":
    main()
