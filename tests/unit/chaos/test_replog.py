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
