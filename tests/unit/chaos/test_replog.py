from __future__ import annotations

import base64
import json

import msgpack

from chaos.replog import retain_writes, subscription_changes


def _retain_value(payload: bytes) -> str:
    value = [[1795329998234, 0, "n1@127.0.0.11"], ["sensors/1", payload, 1, True, "pub", None, [], []]]
    return base64.b64encode(msgpack.packb(value, use_bin_type=True)).decode()


def test_retain_writes_carry_payload_dot_context_and_stamp() -> None:
    lines = [
        json.dumps({"schema": 1, "ts": 1, "node": "n1@127.0.0.11", "hlc": [1795329998234, 0, "n1@127.0.0.11"],
                    "event": "md_write", "prefix": "retain", "key": ["", "sensors/1"],
                    "dot": ["n1@127.0.0.11#5", 1], "op": "put", "value": _retain_value(b"r0-1"), "context": {}}),
        json.dumps({"schema": 1, "ts": 2, "node": "n1@127.0.0.11", "hlc": [1795329998240, 0, "n1@127.0.0.11"],
                    "event": "md_write", "prefix": "retain", "key": ["", "sensors/1"],
                    "dot": ["n1@127.0.0.11#5", 2], "op": "delete", "value": None,
                    "context": {"n1@127.0.0.11#5": 1}}),
        "garbage",
    ]
    put, clear = retain_writes(lines)
    assert (put.topic, put.msg, put.dot, put.hlc) == ("sensors/1", "r0-1", ("n1@127.0.0.11#5", 1),
                                                      (1795329998234, 0, "n1@127.0.0.11"))
    assert clear.msg is None and clear.context == {"n1@127.0.0.11#5": 1}


def test_subscription_changes_from_writes_and_applies() -> None:
    base = {"schema": 1, "hlc": [1, 0, "x"], "prefix": "subscription", "key": ["", "c1", "a/b"]}
    lines = [json.dumps({**base, "ts": 5, "node": "n1", "event": "md_write", "op": "put"}),
             json.dumps({**base, "ts": 6, "node": "n2", "event": "md_apply", "siblings": 1}),
             json.dumps({**base, "ts": 7, "node": "n2", "event": "md_apply", "siblings": 0})]
    assert [(c.node, c.ts, c.present) for c in subscription_changes(lines)] == [
        ("n1", 5, True), ("n2", 6, True), ("n2", 7, False)]


def _retain_line(**changes: object) -> str:
    line: dict[str, object] = {"schema": 1, "ts": 1, "node": "n1", "hlc": [1795329998234, 0, "n1"],
                               "event": "md_write", "prefix": "retain", "key": ["", "t"], "dot": ["n1#5", 1],
                               "op": "put", "value": _retain_value(b"p"), "context": {}}
    line.update(changes)
    return json.dumps({k: v for k, v in line.items() if v != "DROP"})


BAD_RETAIN: list[tuple[str, str, dict[str, object]]] = [
    ("context", "a context that is not a map", {"context": ["n1#5", 1]}),
    ("context", "a context with a non-integer counter", {"context": {"n1#5": "one"}}),
    ("hlc", "a short hlc", {"hlc": [1795329998234, 0]}),
    ("hlc", "an hlc with a text wall clock", {"hlc": ["soon", 0, "n1"]}),
    ("dot", "a dot without a counter", {"dot": ["n1#5"]}),
    ("key", "a key that is a string", {"key": "t"}),
    ("value", "a value that decodes to a map",
     {"value": base64.b64encode(msgpack.packb({"a": 1})).decode()}),
    ("value", "a value that is not base64", {"value": "%%%"}),
    ("value", "a value that is a number", {"value": 7}),
    ("value", "a value whose payload is a map",
     {"value": base64.b64encode(msgpack.packb([[1, 0, "n1"], ["t", {"x": 1}]])).decode()}),
]


def test_malformed_retain_lines_are_skipped_counted_and_named() -> None:
    """Issue 19, finding 4: valid JSON with the wrong shapes raised AttributeError, IndexError, TypeError..."""
    lines = [_retain_line()] + [_retain_line(**change) for _field, _why, change in BAD_RETAIN] + [_retain_line()]
    skipped: list[str] = []
    writes = retain_writes(lines, skipped)
    assert [w.msg for w in writes] == ["p", "p"]
    assert len(skipped) == len(BAD_RETAIN)
    for n, ((field, why, _change), text) in enumerate(zip(BAD_RETAIN, skipped, strict=True), 2):
        assert text.startswith(f"skipped line {n}: {field}"), (why, text)
    assert retain_writes(lines) == writes  # without a list to report to, the same records


def test_malformed_subscription_lines_are_skipped_counted_and_named() -> None:
    base = {"schema": 1, "hlc": [1, 0, "x"], "prefix": "subscription", "key": ["", "c1", "a/b"], "node": "n1"}
    lines = [json.dumps({**base, "ts": 5, "event": "md_write", "op": "put"}),
             json.dumps({**base, "ts": "late", "event": "md_write", "op": "put"}),
             json.dumps({**base, "ts": 6, "event": "md_apply", "siblings": "two"}),
             json.dumps({**base, "ts": 6, "event": "md_apply"}),
             json.dumps({**base, "ts": 6, "event": "md_apply", "siblings": 1, "key": ["", "c1"]}),
             json.dumps({**base, "ts": 6, "event": "md_apply", "siblings": 1, "key": ["", {"c": 1}, "a/b"]}),
             json.dumps({**base, "ts": 6, "event": "md_apply", "siblings": 1, "node": None}),
             json.dumps({**base, "ts": 7, "event": "md_apply", "siblings": 0})]
    skipped: list[str] = []
    changes = subscription_changes(lines, skipped)
    assert [(c.ts, c.present) for c in changes] == [(5, True), (7, False)]
    assert [s.split(":")[0] for s in skipped] == [f"skipped line {n}" for n in range(2, 8)]


def test_a_write_logged_without_its_value_is_skipped_and_said_why() -> None:
    """metadata.replication_log.values = off (the default since issue 33): size and digest, no payload."""
    line = json.dumps({"schema": 1, "ts": 1, "node": "n1", "hlc": [1, 0, "n1"], "event": "md_write",
                       "prefix": "retain", "key": ["", "t"], "dot": ["n1", 1], "op": "put", "value_size": 40,
                       "value_sha256": "0123456789abcdef", "context": {}})
    skipped: list[str] = []
    assert retain_writes([line], skipped) == []
    assert skipped == ["skipped line 1: value not logged (metadata.replication_log.values = off): the payload "
                       "is unknown"]
