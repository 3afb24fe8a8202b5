"""Persistent sessions: one offline persistent subscriber per node; QoS 1 publishes to it are made on the other
nodes while it is away; at the end every subscriber reconnects to its node and drains its queue."""

from __future__ import annotations

import time
from functools import partial

from chaos.mqtt import Client
from chaos.workloads.base import Context, Endpoint, Workload, connect_somewhere, record_op

EXPIRY_S = 3600


def subscriber(index: int) -> str:
    return f"q{index}"


def topic(index: int) -> str:
    return f"chaos/q/{index}"


class Queues(Workload):
    name = "queues"
    workers = 2

    def __init__(self) -> None:
        super().__init__()
        self.homes: dict[str, Endpoint] = {}

    def setup(self, ctx: Context) -> None:
        """Create every subscriber's session on its node, subscribe, and go offline."""
        for i, endpoint in enumerate(ctx.endpoints):
            client_id = subscriber(i)
            process = f"qsub{i}"
            for _ in range(10):
                client = Client(client_id, endpoint.host, endpoint.port, clean=True, session_expiry=EXPIRY_S)
                if client.connect().outcome != "ok":
                    time.sleep(0.5)
                    continue
                result = record_op(ctx, process, "subscribe", {"client": client_id, "filter": topic(i)},
                                   endpoint.name, partial(client.subscribe, topic(i)))
                client.disconnect()
                if result.outcome == "ok":
                    self.homes[client_id] = endpoint
                    break
                time.sleep(0.5)
            else:
                self.errors.append(f"subscriber {client_id} could not subscribe on {endpoint.name}")

    def worker(self, ctx: Context, index: int) -> None:
        rng = ctx.rng(f"qpub{index}")
        process = f"qpub{index}"
        targets = sorted(self.homes)
        conn = None
        done_here = 0
        for n in range(100_000):
            if ctx.stop.is_set() or not targets:
                break
            target = rng.choice(targets)
            home = self.homes[target]
            if conn is None or done_here >= 5 or conn[1].name == home.name:
                if conn is not None:
                    conn[0].disconnect()
                done_here = 0
                conn = connect_somewhere(ctx, rng, f"qpub{index}", avoid=home.name)
                if conn is None:
                    continue
            client, endpoint = conn
            if endpoint.name == home.name:
                continue
            msg = f"m{index}-{n}"
            value = {"topic": topic(int(target[1:])), "msg": msg, "retain": False, "expect": [target]}
            result = record_op(ctx, process, "publish", value, endpoint.name,
                               partial(client.publish, topic(int(target[1:])), msg.encode()))
            done_here += 1
            if result.outcome == "info" or not client.connected:
                client.close()
                conn = None
            ctx.stop.wait(ctx.pace_s)
        if conn is not None:
            conn[0].disconnect()

    def finish(self, ctx: Context) -> None:
        """Every subscriber reconnects and drains what is queued for it: to the node where the cluster says its
        session lives (a leave or a takeover may have moved it), else to its own node; when that node takes no
        connection, to the others in turn."""
        for client_id, home in sorted(self.homes.items()):
            process = "drainer"
            where = ctx.locate(client_id)
            first = next((e for e in ctx.endpoints if e.name == where), home)
            order = [first, *(e for e in ctx.endpoints if e != first)]
            ctx.recorder.record("invoke", process, "drain", {"client": client_id, "located": where}, first.name)
            msgs: list[str] | None = None
            endpoint = first
            for attempt in range(10):
                endpoint = order[attempt // 3 % len(order)]  # three tries a node
                client = Client(client_id, endpoint.host, endpoint.port, clean=False, session_expiry=EXPIRY_S)
                if client.connect().outcome == "ok":
                    received = client.collect(quiet=2.0, limit=30.0)
                    client.disconnect()
                    msgs = [payload.decode(errors="replace") for _, payload in received]
                    break
                time.sleep(0.5)
            if msgs is None:
                ctx.recorder.record("fail", process, "drain", {"client": client_id, "error": "no connect"},
                                    endpoint.name)
            else:
                ctx.recorder.record("ok", process, "drain", {"client": client_id, "msgs": msgs}, endpoint.name)
