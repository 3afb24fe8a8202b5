from __future__ import annotations

import io
import json

from chaos.history import Event, Recorder, pair, parse_lines


def test_invoke_is_completed_by_the_next_event_of_the_same_process_and_f() -> None:
    events = [
        Event("invoke", "p", "publish", {"msg": "a"}, "n1", 1),
        Event("invoke", "q", "publish", {"msg": "b"}, "n1", 2),
        Event("fail", "q", "publish", {"msg": "b"}, "n1", 3),
        Event("ok", "p", "publish", {"msg": "a"}, "n1", 4),
        Event("invoke", "p", "subscribe", {"client": "c"}, "n2", 5),
    ]
    ops = pair(events)
    assert [(o.process, o.outcome, o.invoked, o.completed) for o in ops] == [
        ("p", "ok", 1, 4), ("q", "fail", 2, 3), ("p", "info", 5, None)]


def test_info_completion_never_completes() -> None:
    ops = pair([Event("invoke", "p", "publish", None, "n1", 1), Event("info", "p", "publish", None, "n1", 9)])
    assert ops[0].outcome == "info" and ops[0].completed is None


def test_recorder_writes_the_contract_fields_and_malformed_lines_are_counted() -> None:
    out = io.StringIO()
    recorder = Recorder(out, clock=lambda: 1795331171950013000)
    recorder.record("invoke", "1", "publish", {"topic": "t/1", "msg": "p1-17", "retain": False}, "n1@127.0.0.11")
    recorder.record("ok", "1", "publish", {"topic": "t/1", "msg": "p1-17", "retain": False}, "n1@127.0.0.11")
    line = json.loads(out.getvalue().splitlines()[0])
    assert line == {"type": "invoke", "process": "1", "f": "publish",
                    "value": {"topic": "t/1", "msg": "p1-17", "retain": False}, "node": "n1@127.0.0.11",
                    "time": 1795331171950013000}
    events, malformed = parse_lines([*out.getvalue().splitlines(), "not json", '{"type":"weird"}', ""])
    assert len(events) == 2 and malformed == 2
    assert recorder.completed == 1
