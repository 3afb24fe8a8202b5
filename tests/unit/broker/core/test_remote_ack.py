"""The acknowledgement of a forwarded QoS 1/2 publish by the other nodes: a countdown with callbacks."""

from __future__ import annotations

from vmqpy.broker.core.remote_ack import RemoteAck


def test_done_after_every_node_acknowledged_and_callbacks_run_once() -> None:
    ack = RemoteAck(2)
    calls: list[str] = []
    ack.add_done_callback(lambda: calls.append("first"))
    ack.one_done()
    assert not ack.done() and calls == []
    ack.one_done()
    assert ack.done() and ack.error is None and calls == ["first"]
    ack.one_done()  # a late or repeated acknowledgement changes nothing
    ack.fail("gone")
    assert ack.error is None and calls == ["first"]
    ack.add_done_callback(lambda: calls.append("late"))  # added when done: runs at once
    assert calls == ["first", "late"]


def test_the_first_failure_settles_it() -> None:
    ack = RemoteAck(3)
    calls: list[str] = []
    ack.add_done_callback(lambda: calls.append("cb"))
    ack.one_done()
    ack.fail("n3 left the cluster")
    assert ack.done() and str(ack.error) == "n3 left the cluster" and calls == ["cb"]
    ack.fail("again")
    ack.one_done()
    ack.one_done()
    assert str(ack.error) == "n3 left the cluster" and calls == ["cb"]


def test_nothing_to_wait_for_is_done_at_once() -> None:
    ack = RemoteAck(0)
    calls: list[int] = []
    ack.add_done_callback(lambda: calls.append(1))
    assert ack.done() and calls == [1]
