"""The asyncio driver: replicas over a loopback transport, SQLite storage, the replication log, restarts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.unit.metadata.services import LoopbackNetwork, start, stop, wait_for


async def test_two_services_replicate_put_and_delete(tmp_path: Path) -> None:
    net = LoopbackNetwork()
    a = start(tmp_path, "a", net, ["b"])
    b = start(tmp_path, "b", net, ["a"])
    seen: list[tuple[Any, Any, Any]] = []
    b.on_change("retain", lambda key, old, new: seen.append((key, old, new)))
    a.put("retain", ("", "t/1"), [a.hlc_now().to_list(), "v1"])
    await wait_for(lambda: b.get("retain", ("", "t/1")) is not None)
    replicated = b.get("retain", ("", "t/1"))
    assert replicated is not None and replicated[1] == "v1"
    a.delete("retain", ("", "t/1"))
    await wait_for(lambda: b.get("retain", ("", "t/1")) is None)
    assert [(k, o is None, n is None) for k, o, n in seen] == [(("", "t/1"), True, False), (("", "t/1"), False, True)]
    stop(a)
    stop(b)


async def test_partitioned_write_arrives_by_anti_entropy_after_heal(tmp_path: Path) -> None:
    net = LoopbackNetwork()
    a = start(tmp_path, "a", net, ["b"])
    b = start(tmp_path, "b", net, ["a"])
    net.cut.add(frozenset(("a", "b")))
    a.put("subscription", ("", "c", "x/#"), [a.hlc_now().to_list(), "a", 1])
    await asyncio.sleep(0.2)
    assert b.get("subscription", ("", "c", "x/#")) is None
    net.cut.clear()
    await wait_for(lambda: b.get("subscription", ("", "c", "x/#")) is not None)
    stop(a)
    stop(b)


async def test_restart_keeps_values_and_logs_events(tmp_path: Path) -> None:
    net = LoopbackNetwork()
    a = start(tmp_path, "a", net, [])
    for i in range(50):
        a.put("retain", ("", f"t/{i}"), [a.hlc_now().to_list(), i])
    a.delete("retain", ("", "t/0"))
    await a.storage.sync()
    stop(a)
    again = start(tmp_path, "a", LoopbackNetwork(), [])
    assert again.get("retain", ("", "t/0")) is None
    assert [v[1] for _k, v in sorted(again.fold("retain"), key=lambda kv: kv[1][1])] == list(range(1, 50))
    again.put("retain", ("", "t/new"), [again.hlc_now().to_list(), "after restart"])
    stop(again)
    lines = [json.loads(line) for line in (tmp_path / "a" / "replication.log").read_text().splitlines()]
    writes = [line for line in lines if line["event"] == "md_write"]
    assert len(writes) == 52
    assert {"schema", "ts", "node", "hlc", "prefix", "key", "dot", "op"} <= set(writes[0])
    assert writes[50]["op"] == "delete"
    dots = [tuple(w["dot"]) for w in writes]
    assert len(set(dots)) == len(dots), "a restarted node reused a dot"


async def test_undecodable_frame_is_counted_not_fatal(tmp_path: Path) -> None:
    net = LoopbackNetwork()
    a = start(tmp_path, "a", net, ["b"])
    net.receivers["a"]("b", b"\x00garbage")
    assert a.decode_errors == 1
    a.put("retain", ("", "t"), [a.hlc_now().to_list(), 1])
    assert a.get("retain", ("", "t")) is not None
    stop(a)


async def test_a_frozen_store_writes_nothing_until_it_is_reincarnated(tmp_path: Path) -> None:
    """A node that left its cluster freezes its store (chaos finding 5): no write reaches the store, the log or
    a peer; `reincarnate` empties it and it takes writes again under its new id."""
    net = LoopbackNetwork()
    a = start(tmp_path, "a", net, ["b"])
    b = start(tmp_path, "b", net, ["a"])
    a.put("retain", ("", "t/1"), [a.hlc_now().to_list(), "v1"])
    await wait_for(lambda: b.get("retain", ("", "t/1")) is not None)
    assert a.replication_log is not None
    a.freeze()
    a.replication_log.flush()
    lines = (tmp_path / "a" / "replication.log").read_text().count("md_write")
    a.put("retain", ("", "t/2"), [a.hlc_now().to_list(), "v2"])
    a.delete("retain", ("", "t/1"))
    await asyncio.sleep(0.2)
    a.replication_log.flush()
    assert a.get("retain", ("", "t/2")) is None and a.get("retain", ("", "t/1")) is not None
    assert b.get("retain", ("", "t/2")) is None and b.get("retain", ("", "t/1")) is not None
    assert (tmp_path / "a" / "replication.log").read_text().count("md_write") == lines
    await a.reincarnate("a#2")
    assert a.get("retain", ("", "t/1")) is None  # emptied
    a.put("retain", ("", "t/3"), [a.hlc_now().to_list(), "v3"])
    assert a.get("retain", ("", "t/3")) is not None
    stop(a)
    stop(b)


async def test_a_line_logged_for_another_part_of_the_node_reaches_the_file_at_the_end_of_the_turn(
        tmp_path: Path) -> None:
    # the queue replicas' under-replication windows (vmqpy/replicas/audit.py): on a quiet cluster no metadata
    # event follows a window's end, so its line must not wait in memory for one
    service = start(tmp_path, "a", LoopbackNetwork(), [])
    try:
        assert service.replication_log is not None
        path = service.replication_log.path
        service.log("queue_replicas", {"under_replicated": False, "sessions": 0})
        await asyncio.sleep(0)  # the rest of this turn
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(line["event"], line["under_replicated"]) for line in lines if line["event"] == "queue_replicas"] \
            == [("queue_replicas", False)]
    finally:
        stop(service)
