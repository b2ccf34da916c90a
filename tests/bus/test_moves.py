"""``bus._moves``: a moved wait is resent as a ``result`` naming its workflow and the wait left,
and an ``execute``'s reply gets its run's handle back (the client reads ``id`` from it when
the run is still going)."""

from __future__ import annotations

from weft_actors.bus import encode_error
from weft_actors.bus._moves import Moves
from weft_actors.bus._protocol import decode_reply, decode_request, encode_reply
from weft_actors.errors import WorkflowMoved


def _moved(request_id: object, **context: object) -> bytes:
    return encode_error(request_id, WorkflowMoved("moved", **context))


def test_a_moved_execute_is_resent_as_a_result_and_its_reply_holds_the_handle() -> None:
    moves = Moves()
    resent = moves.resend(b"c", 7, "execute", _moved(7, wid="w1", wait=12.5, run_id="r1"))
    assert resent is not None
    frame, wid = resent
    request = decode_request(frame)
    assert (wid, request["op"], request["id"], request["wid"], request["wait"]) == ("w1", "result", 7, "w1", 12.5)
    reply = decode_reply(moves.reply(b"c", 7, encode_reply(7, {"status": "running"}), None))
    assert reply == {"v": reply["v"], "id": 7, "ok": {"id": "w1", "run_id": "r1", "status": "running"}}
    assert not moves.handles


def test_a_moved_result_is_resent_as_it_is_and_an_error_reply_passes_unchanged() -> None:
    moves = Moves()
    assert moves.resend(b"c", 1, "result", _moved(1, wid="w2", wait=3.0)) is not None
    assert not moves.handles  # a result's reply is a result's
    moves.resend(b"c", 2, "execute", _moved(2, wid="w3", wait=0.0, run_id="r3"))
    error = encode_error(2, WorkflowMoved("again", wid="w3", wait=0.0))
    assert moves.reply(b"c", 2, error, "workflow_moved") == error
    assert not moves.handles


def test_a_moved_answer_without_its_workflow_is_not_resent() -> None:
    moves = Moves()
    assert moves.resend(b"c", 1, "execute", _moved(1, wait=3.0)) is None
    assert moves.resend(b"c", 1, "execute", b"\x00garbage") is None
    assert not moves.handles
