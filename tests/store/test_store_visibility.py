"""Conformance: the listing guarantee while workflows change between pages.

``list_workflows`` promises (see its docstring): ids ascend (UTF-8 byte order) within and
across pages, so no workflow is listed twice; every page is one snapshot; a workflow that
exists and matches the filter for the whole listing is listed exactly once, even while its
status changes (unfiltered and type-only listings); one that starts or stops matching during
the listing is listed at most once, and only if it matched at some point.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from weft_actors.errors import InvalidRequest
from weft_actors.store import TERMINAL, CloseWorkflow, Created, CreateWorkflow, FireStart, PurgeWorkflow

TYPES = ("A", "B", "Céleri")
FILTERS = [
    {},
    {"status": "running"},
    {"status": "completed"},
    {"wf_type": "A"},
    {"wf_type": "Céleri"},
    {"status": "running", "wf_type": "B"},
    {"status": "pending"},
]


class Population:
    """A store and a model of it: id -> (status, type) and the claim of each running one."""

    def __init__(self, kit: Any, clock: Any, rng: random.Random) -> None:
        self.kit, self.store, self.clock, self.rng = kit, kit.store, clock, rng
        self.engine = kit.engine()
        self.model: dict[str, tuple[str, str]] = {}
        self.runs: dict[str, tuple[str, int]] = {}
        self._n = 0

    def new_id(self) -> str:
        self._n += 1
        head = self.rng.choice(["a", "m", "z", "é", "中", "A", "0"])
        return f"{head}{self.rng.randrange(10_000):04d}-{self._n}"

    def create(self, wid: str | None = None, *, if_exists: str = "error") -> None:
        wid = wid or self.new_id()
        wf_type = self.rng.choice(TYPES)
        delayed = self.rng.random() < 0.15
        intent = self.kit.create_intent(wid, wf_type=wf_type, if_exists=if_exists)
        if delayed:
            intent = intent._replace(start_at=self.clock.now() + 60)
        (result,) = self.store.apply(self.engine, [intent])
        assert isinstance(result, Created) and result.created, result
        self.model[wid] = (result.status, wf_type)
        self.runs[wid] = (intent.run_id, result.epoch)

    def _pick(self, *statuses: str) -> str | None:
        found = sorted(w for w, (s, _) in self.model.items() if s in statuses)
        return self.rng.choice(found) if found else None

    def mutate(self) -> None:
        """One random change: create, finish, fail, terminate, fire a delayed start, start a
        finished id anew (maybe as another type), or purge a finished one."""
        self.clock.advance(0.01)
        self.store.heartbeat(self.engine)
        action = self.rng.choice(["create", "finish", "fail", "terminate", "fire", "start_new", "purge"])
        if action == "create":
            self.create()
        elif action in ("finish", "fail"):
            wid = self._pick("running")
            if wid is not None:
                run_id, epoch = self.runs[wid]
                status = "completed" if action == "finish" else "failed"
                assert self.kit.finish(self.engine, wid, epoch, run_id, status) is None
                self.model[wid] = (status, self.model[wid][1])
        elif action == "terminate":
            wid = self._pick("running", "pending")
            if wid is not None:
                (result,) = self.store.apply(self.engine, [CloseWorkflow(wid, "terminated", {"message": "t"})])
                assert isinstance(result, dict), result
                self.model[wid] = ("terminated", self.model[wid][1])
        elif action == "fire":
            wid = self._pick("pending")
            if wid is not None:
                (epoch,) = self.store.apply(self.engine, [FireStart(wid, self.runs[wid][0])])
                assert isinstance(epoch, int), epoch
                self.model[wid] = ("running", self.model[wid][1])
                self.runs[wid] = (self.runs[wid][0], epoch)
        elif action == "start_new":
            wid = self._pick(*TERMINAL)
            if wid is not None:
                self.create(wid, if_exists="start_new")
        else:
            wid = self._pick(*TERMINAL)
            if wid is not None:
                (result,) = self.store.apply(self.engine, [PurgeWorkflow(wid)])
                assert isinstance(result, int), result
                del self.model[wid]


def _matches(entry: tuple[str, str] | None, filters: dict[str, Any]) -> bool:
    if entry is None:
        return False
    status, wf_type = entry
    return filters.get("status", status) == status and filters.get("wf_type", wf_type) == wf_type


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()) or "all")
@pytest.mark.parametrize("seed", range(8))
def test_pagination_while_statuses_change_has_no_duplicates_and_no_gaps(kit, fake_clock, seed, filters):
    rng = random.Random(seed)
    population = Population(kit, fake_clock, rng)
    for _ in range(40):
        population.create()
    for _ in range(20):
        population.mutate()

    always = {w for w, entry in population.model.items() if _matches(entry, filters)}
    ever = set(always)
    listed: list[str] = []
    cursor = None
    while True:
        page = kit.store.list_workflows(limit=rng.randint(1, 6), cursor=cursor, **filters)
        for item in page["items"]:  # a page is one snapshot: it shows the store as it is now
            assert population.model[item["id"]] == (item["status"], item["type"])
            assert _matches((item["status"], item["type"]), filters)
        listed.extend(item["id"] for item in page["items"])
        cursor = page["cursor"]
        if cursor is None:
            break
        assert len(listed) < 1000, "pagination does not terminate"
        for _ in range(rng.randint(0, 6)):
            population.mutate()
            for wid in list(always):
                if not _matches(population.model.get(wid), filters):
                    always.discard(wid)
            ever |= {w for w, entry in population.model.items() if _matches(entry, filters)}

    assert len(listed) == len(set(listed)), "a workflow was listed twice"
    assert [w.encode() for w in listed] == sorted(w.encode() for w in listed)
    assert always <= set(listed), f"gap: {sorted(always - set(listed))}"
    assert set(listed) <= ever


def test_unfiltered_listing_sees_a_workflow_once_when_it_finishes_behind_and_ahead_of_the_cursor(kit):
    """The scenario the old (status, updated) order got wrong: a workflow finishing between
    pages moved from the running section to the completed one, after the cursor."""
    store = kit.store
    eid = kit.engine()
    runs = {}
    for name in ("a", "b", "c", "d"):
        wid, run_id, epoch = kit.start(eid, name)
        runs[wid] = (run_id, epoch)

    first = store.list_workflows(limit=2)
    assert [item["id"] for item in first["items"]] == ["a", "b"]
    for wid in ("a", "d"):  # one already listed, one not yet
        assert kit.finish(eid, wid, runs[wid][1], runs[wid][0]) is None
    rest = store.list_workflows(limit=10, cursor=first["cursor"])

    assert [(item["id"], item["status"]) for item in rest["items"]] == [("c", "running"), ("d", "completed")]
    assert rest["cursor"] is None


def test_type_filter_merges_every_status_in_id_order(kit):
    store = kit.store
    eid = kit.engine()
    started = {}
    for wid, wf_type in [("k", "T"), ("b", "T"), ("x", "U"), ("f", "T"), ("a", "U")]:
        started[wid] = kit.start(eid, wid, wf_type=wf_type)
    _, run_id, epoch = started["f"]
    assert kit.finish(eid, "f", epoch, run_id, "failed") is None

    page = store.list_workflows(wf_type="T", limit=2)
    rest = store.list_workflows(wf_type="T", limit=2, cursor=page["cursor"])

    assert [(i["id"], i["status"]) for i in page["items"]] == [("b", "running"), ("f", "failed")]
    assert [(i["id"], i["status"]) for i in rest["items"]] == [("k", "running")]
    assert rest["cursor"] is None


def test_status_filter_merges_every_type_in_id_order(kit):
    eid = kit.engine()
    for wid, wf_type in [("q", "Z"), ("c", "Y"), ("m", "X"), ("d", "Z")]:
        kit.start(eid, wid, wf_type=wf_type)

    assert kit.listed_ids(status="running") == ["c", "d", "m", "q"]


def test_items_carry_the_time_of_the_last_status_change(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    started = fake_clock.now()
    fake_clock.advance(2.0)
    assert kit.finish(eid, wid, epoch, run_id) is None

    (item,) = store.list_workflows()["items"]

    assert item["status"] == "completed"
    assert item["updated"] == pytest.approx(started + 2.0, abs=1e-3)


def test_cursor_from_another_type_listing_is_invalid_request(kit):
    eid = kit.engine()
    for wid in ("a", "b", "c"):
        kit.start(eid, wid, wf_type="T")
    cursor = kit.store.list_workflows(wf_type="T", limit=1)["cursor"]
    assert cursor is not None

    for other in ({"wf_type": "U"}, {}, {"status": "running", "wf_type": "T"}):
        with pytest.raises(InvalidRequest):
            kit.store.list_workflows(limit=1, cursor=cursor, **other)


def test_a_cursor_with_nothing_left_after_it_gives_an_empty_last_page(kit):
    eid = kit.engine()
    runs = {wid: kit.start(eid, wid) for wid in ("a", "b")}
    first = kit.store.list_workflows(limit=1)
    _, run_id, epoch = runs["b"]
    assert kit.finish(eid, "b", epoch, run_id) is None
    assert kit.store.apply(eid, [PurgeWorkflow("b")]) == [2]

    second = kit.store.list_workflows(limit=1, cursor=first["cursor"])

    assert second == {"items": [], "cursor": None}


def test_purged_workflow_leaves_the_listing_and_the_next_one_follows(kit):
    store = kit.store
    eid = kit.engine()
    runs = {wid: kit.start(eid, wid) for wid in ("a", "b", "c")}
    first = store.list_workflows(limit=1)
    _, run_id, epoch = runs["b"]
    assert kit.finish(eid, "b", epoch, run_id) is None
    assert store.apply(eid, [PurgeWorkflow("b")]) == [2]

    rest = store.list_workflows(limit=5, cursor=first["cursor"])

    assert [item["id"] for item in rest["items"]] == ["c"]


def test_start_new_of_a_finished_id_keeps_one_entry(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid, "again", wf_type="Old")
    assert kit.finish(eid, wid, epoch, run_id) is None

    (result,) = store.apply(eid, [CreateWorkflow(wid, "New", b"\x90", "ab" * 16, "start_new")])

    assert result.created
    items = store.list_workflows()["items"]
    assert [(i["id"], i["type"], i["status"]) for i in items] == [("again", "New", "running")]
    assert kit.listed_ids(status="completed") == []
