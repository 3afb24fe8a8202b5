"""The asyncio driver: replicas over a loopback transport, SQLite storage, the replication log, restarts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vmqpy.metadata.replication_log import ReplicationLog
from vmqpy.metadata.service import MetadataService
from vmqpy.storage import Storage


class LoopbackNetwork:
    """Frames between services in one event loop, delivered on a later loop pass; links can be cut."""

    def __init__(self) -> None:
        self.receivers: dict[str, Callable[[str, bytes], None]] = {}
        self.cut: set[frozenset[str]] = set()
        self.frames = 0

    def transport(self, node: str) -> LoopbackTransport:
        return LoopbackTransport(self, node)


class LoopbackTransport:
    def __init__(self, network: LoopbackNetwork, node: str) -> None:
        self.network = network
        self.node = node

    def send(self, peer: str, data: bytes) -> None:
        if frozenset((self.node, peer)) in self.network.cut:
            return
        receiver = self.network.receivers.get(peer)
        if receiver is not None:
            self.network.frames += 1
            asyncio.get_running_loop().call_soon(receiver, self.node, data)

    def set_receiver(self, receiver: Callable[[str, bytes], None]) -> None:
        self.network.receivers[self.node] = receiver


def start(tmp: Path, node: str, network: LoopbackNetwork, peers: list[str]) -> MetadataService:
    storage = Storage(tmp / node / "md.db")
    storage.open()
    log = ReplicationLog(tmp / node / "replication.log", node)
    log.open()
    service = MetadataService(node, storage, replication_log=log, transport=network.transport(node),
                              sync_interval=0.05, seed=1)
    service.start()
    service.set_peers(peers)
    service.set_reachable(peers)
    return service


def stop(service: MetadataService) -> None:
    service.stop()
    assert service.replication_log is not None
    service.replication_log.close()
    service.storage.close()


async def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


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
