"""A schedule's note is a note: text of at most 500 characters, refused otherwise by the
handle, by the schedule's own validator (a raw update from any client) and by the console's
form, so no note can make the schedule's ``describe`` answer too large to read (a real
supervisor; the console over real HTTP)."""

from __future__ import annotations

import pytest

from _console import TOKEN, console_supervisor, post_form
from weft_actors import Client
from weft_actors.errors import InvalidRequest, UpdateRejected

pytestmark = pytest.mark.timeout(90)


def test_a_long_or_non_text_note_is_refused_and_the_schedule_stays_readable(tmp_path):
    sup, base = console_supervisor(tmp_path, shards=1)
    with sup, Client(sup.endpoint, timeout=10) as client:
        schedule = client.create_schedule("s-note", "echo", "tick", spec={"every": 3600})
        with pytest.raises(InvalidRequest, match="at most 500 characters"):
            schedule.pause("n" * 501)
        with pytest.raises(InvalidRequest, match="note must be text"):
            schedule.pause({"k": 1})  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest, match="at most 500 characters"):
            client.create_schedule("s-other", "echo", spec={"every": 3600}, paused=True, note="n" * 501)
        raw = client.get_handle("s-note")  # an update that no handle checked
        for note in ("n" * 1_000_000, ["a list"]):
            with pytest.raises(UpdateRejected) as refused:
                raw.update("pause", note)
            assert refused.value.code == "update_rejected" and "note" in str(refused.value)
        status, _, page = post_form(f"{base}/schedules/s-note/pause", {"token": TOKEN, "note": "n" * 600})
        assert status in (400, 409) and b"at most 500 characters" in page
        described = schedule.describe()
        assert described["paused"] is False and described["note"] is None
        schedule.pause("n" * 500)
        assert schedule.describe()["note"] == "n" * 500
