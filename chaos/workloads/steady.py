"""A steady load of persistent clients that stay connected: online QoS 1 subscribers (clean start 0, a session
expiry of an hour), each on its own topic, and persistent publishers publishing to them in turn. A client whose
connection ends (the server told it to go, or the connection was lost) reconnects at once, again and again,
through the same endpoints (HAProxy in the rolling restart). Recorded so that the unchanged checkers judge it:
each subscription (subscriptions), every publish with the subscriber it expects (queues), every connect and end
(registration), and at the end one `drain` per subscriber with every message it received (queues). The connects
and ends also give the time each client was without a connection (chaos/checkers/outages.py, processes named
`steady-...`)."""

from __future__ import annotations

import threading
import time
from functools import partial

from chaos.mqtt import Client
from chaos.workloads.base import Context, Endpoint, Workload, record_op

EXPIRY_S = 3600
SUBSCRIBERS = 6
PUBLISHERS = 2
PUBLISH_PACE_S = 0.05  # between two publishes of one publisher
RECONNECT_PAUSE_S = 0.1  # after a refused connect
QUIET_S = 3.0  # the end: no message for this long ...
SETTLE_S = 30.0  # ... or at most this long
PROCESS_PREFIX = "steady-"


def subscriber(index: int) -> str:
    return f"steady-s{index}"


def topic(index: int) -> str:
    return f"chaos/steady/{index}"


class Steady(Workload):
    name = "steady"
    workers = PUBLISHERS

    def __init__(self, subscribers: int = SUBSCRIBERS) -> None:
        super().__init__()
        self.subscribers = subscribers
        self.ready: list[int] = []  # subscribers whose subscription was acknowledged
        self.received: dict[str, list[str]] = {}
        self.last_message = time.monotonic()
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._connected: dict[str, bool] = {}
        self._listeners: list[threading.Thread] = []

    def setup(self, ctx: Context) -> None:
        """Every subscriber's persistent session and subscription, then the subscribers stay connected."""
        endpoint = ctx.endpoints[0]
        for i in range(self.subscribers):
            cid = subscriber(i)
            for _ in range(10):
                client = Client(cid, endpoint.host, endpoint.port, clean=True, session_expiry=EXPIRY_S)
                subscribe = partial(client.subscribe, topic(i))
                if client.connect().outcome == "ok" and record_op(
                        ctx, f"{PROCESS_PREFIX}setup{i}", "subscribe", {"client": cid, "filter": topic(i)},
                        endpoint.name, subscribe).outcome == "ok":
                    client.disconnect()
                    self.ready.append(i)
                    self.received[cid] = []
                    break
                client.close()
                time.sleep(0.5)
            else:
                self.errors.append(f"subscriber {cid} could not subscribe through {endpoint.name}")
        for i in self.ready:
            thread = threading.Thread(target=self._guard_listen, args=(ctx, i), name=f"steady-sub{i}", daemon=True)
            self._listeners.append(thread)
            thread.start()

    # -- subscribers -------------------------------------------------------------------------------------------
    def _guard_listen(self, ctx: Context, index: int) -> None:
        try:
            self._listen(ctx, index)
        except Exception as exc:  # reported in the verdict, never a hang
            self.errors.append(f"steady-sub{index}: {type(exc).__name__}: {exc}")

    def _listen(self, ctx: Context, index: int) -> None:
        cid = subscriber(index)
        process = f"{PROCESS_PREFIX}sub{index}"
        rng = ctx.rng(process)
        for _ in range(100_000):
            if self._halt.is_set():
                return
            endpoint = rng.choice(ctx.endpoints)
            client = self._connect(ctx, process, cid, endpoint)
            if client is None:
                self._halt.wait(RECONNECT_PAUSE_S)
                continue
            with self._lock:
                self._connected[cid] = True
            while client.connected and not self._halt.is_set():
                client.pump(0.1)
                if client.messages:
                    with self._lock:
                        self.received[cid].extend(p.decode(errors="replace") for _, p in client.messages)
                        self.last_message = time.monotonic()
                    client.messages.clear()
            with self._lock:
                self._connected[cid] = False
            if self._halt.is_set():
                ctx.recorder.record("invoke", process, "disconnect", {"client": cid}, endpoint.name)
                client.disconnect()
                ctx.recorder.record("ok", process, "disconnect", {"client": cid}, endpoint.name)
                return
            _record_end(ctx, process, cid, client, endpoint)
            client.close()

    def _connect(self, ctx: Context, process: str, cid: str, endpoint: Endpoint) -> Client | None:
        ctx.recorder.record("invoke", process, "connect", {"client": cid}, endpoint.name)
        client = Client(cid, endpoint.host, endpoint.port, clean=False, session_expiry=EXPIRY_S)
        result = client.connect()
        if result.outcome != "ok":
            ctx.recorder.record(result.outcome, process, "connect",
                                {"client": cid, "code": result.code, "error": result.detail or None}, endpoint.name)
            return None
        ctx.recorder.record("ok", process, "connect", {"client": cid}, endpoint.name)
        return client

    # -- publishers --------------------------------------------------------------------------------------------
    def worker(self, ctx: Context, index: int) -> None:
        cid = f"steady-p{index}"
        process = f"{PROCESS_PREFIX}pub{index}"
        rng = ctx.rng(process)
        targets = list(self.ready)
        client: Client | None = None
        endpoint = ctx.endpoints[0]
        for n in range(100_000):
            if ctx.stop.is_set() or not targets:
                break
            if client is None:
                endpoint = rng.choice(ctx.endpoints)
                client = self._connect(ctx, process, cid, endpoint)
                if client is None:
                    ctx.stop.wait(RECONNECT_PAUSE_S)
                    continue
            target = targets[n % len(targets)]
            msg = f"s{index}-{n}"
            value = {"topic": topic(target), "msg": msg, "retain": False, "expect": [subscriber(target)]}
            result = record_op(ctx, process, "publish", value, endpoint.name,
                               partial(client.publish, topic(target), msg.encode()))
            if result.outcome == "info" or not client.connected:
                _record_end(ctx, process, cid, client, endpoint)
                client.close()
                client = None
            ctx.stop.wait(PUBLISH_PACE_S)
        if client is not None:
            ctx.recorder.record("invoke", process, "disconnect", {"client": cid}, endpoint.name)
            client.disconnect()
            ctx.recorder.record("ok", process, "disconnect", {"client": cid}, endpoint.name)

    # -- the end -----------------------------------------------------------------------------------------------
    def finish(self, ctx: Context) -> None:
        """Wait until every subscriber is connected and no message arrived for QUIET_S (at most SETTLE_S), stop the
        subscribers, and record what each received as its drain."""
        end = time.monotonic() + SETTLE_S
        while time.monotonic() < end:
            with self._lock:
                online = all(self._connected.get(subscriber(i), False) for i in self.ready)
                quiet = time.monotonic() - self.last_message >= QUIET_S
            if online and quiet:
                break
            time.sleep(0.2)
        for i in self.ready:
            ctx.recorder.record("invoke", f"{PROCESS_PREFIX}drain{i}", "drain", {"client": subscriber(i)}, "steady")
        self._halt.set()
        for thread in self._listeners:
            thread.join(10)
        for i in self.ready:
            cid = subscriber(i)
            with self._lock:
                msgs = list(self.received[cid])
            ctx.recorder.record("ok", f"{PROCESS_PREFIX}drain{i}", "drain", {"client": cid, "msgs": msgs}, "steady")


def _record_end(ctx: Context, process: str, cid: str, client: Client, endpoint: Endpoint) -> None:
    """How a connection ended, as the registration checker reads it."""
    if client.server_disconnected:
        ctx.recorder.record("info", process, "server-disconnect", {"client": cid, "code": client.disconnect_code},
                            endpoint.name)
    else:
        ctx.recorder.record("info", process, "lost", {"client": cid}, endpoint.name)
