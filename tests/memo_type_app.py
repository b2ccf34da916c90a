"""An app whose memos hold a value of its own class (imported by path: tests/ is on
PYTHONPATH, only by the processes that run it; the test process never imports it)."""

from __future__ import annotations

import dataclasses

from weft_actors import register_type, workflow


@dataclasses.dataclass
class Point:
    x: int
    y: int


register_type(Point)


@workflow
async def quick(ctx) -> str:
    return "ok"


@workflow
async def located(ctx) -> Point:
    return Point(3, 4)
