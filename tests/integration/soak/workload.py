"""The soak's client mix, seeded and driven from one thread (each round the same choices for the same seed):

- persistent sessions (MQTT 5 with a session expiry, and 3.1.1 with clean session false) on the nodes that stay,
  subscribed at QoS 1 or 2, going offline and coming back, picking up what was queued for them meanwhile;
- QoS 1 and 2 messages to them from publishers on every serving node (across nodes), each counted only when
  the broker acknowledged it (PUBACK, or PUBREC + PUBCOMP, with a success code): every counted message must
  reach its subscriber (`lost()`);
- short-lived clean clients (connect, subscribe to a few filters, QoS 0 publishes, unsubscribe, disconnect);
- subscriptions churning inside the persistent sessions (one extra filter subscribed, the previous one dropped);
- retained updates on a fixed set of topics, some cleared with an empty payload.

A node may be down or out of the cluster for a while (the soak restarts one, another leaves and joins): a
client whose connection fails or closes is dropped and connects again in a later round; such failures are
counted (`errors`), not raised. Every loop is bounded."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from tests.integration.clients import (
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    UNSUBACK,
    Closed,
    RawClient,
    enc_ack,
    enc_publish,
    enc_unsubscribe,
)

__all__ = ["Mix", "Persistent", "Target"]

EXPIRY = {"session_expiry_interval": 3600}
RETAINED_TOPICS = 40
FAILURES = (Closed, OSError, TimeoutError, AssertionError)


class Target(Protocol):
    """A node as the workload sees it."""

    host: str
    mqtt_port: int

    @property
    def short(self) -> str: ...


@dataclass
class Persistent:
    client_id: str
    home: int  # index into the targets: the node the session lives on
    topic: str
    qos: int
    version: int
    client: RawClient | None = None
    extra: str | None = None  # the churning extra filter
    subscribed: bool = False  # its subscription to `topic` acknowledged (messages count only from then on)
    expected: set[str] = field(default_factory=set)
    received: set[str] = field(default_factory=set)


class Mix:
    def __init__(self, targets: list[Target], seed: int, persistent_homes: list[int], sessions: int = 8) -> None:
        self.targets = targets
        self.rng = random.Random(seed)
        self.serving = set(range(len(targets)))  # the targets clients may use now
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.first_errors: dict[str, str] = {}
        self.error_times: dict[str, Counter[int]] = {}  # kind -> errors per 5 s of the run
        self.publishers: dict[int, RawClient] = {}
        self.persistent = [
            Persistent(f"soak-p{i}", persistent_homes[i % len(persistent_homes)], f"soak/p/{i}", 1 + i % 2,
                       5 if i % 3 else 4)
            for i in range(sessions)
        ]
        self._serial = 0
        self.t0 = time.monotonic()
        self.acked_at: dict[str, tuple[float, int]] = {}  # payload -> (seconds into the run, publisher's node)

    # ------------------------------------------------------------------------------------------------ plumbing

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    def _fail(self, what: str, exc: BaseException) -> None:
        kind = f"{what}: {type(exc).__name__}"
        self.errors[kind] += 1
        self.first_errors.setdefault(kind, str(exc)[:300])
        self.error_times.setdefault(kind, Counter())[int((time.monotonic() - self.t0) // 5 * 5)] += 1

    def _connect(self, index: int, client_id: str, version: int = 5, clean: bool = True) -> RawClient:
        node = self.targets[index]
        client = RawClient(node.mqtt_port, node.host, version, connect_timeout=5.0)
        try:
            props = EXPIRY if (version == 5 and not clean) else None
            client.connect(client_id, clean=clean, props=props, timeout=10.0)
        except BaseException:
            client.close()
            raise
        self.counts["connects"] += 1
        return client

    def close_all(self) -> None:
        for client in self.publishers.values():
            client.disconnect()
        self.publishers.clear()
        for p in self.persistent:
            if p.client is not None:
                p.client.disconnect()
                p.client = None

    def node_lost(self, index: int) -> None:
        """The node `index` stops serving (restart, leave): its clients are dropped now, without waiting."""
        self.serving.discard(index)
        publisher = self.publishers.pop(index, None)
        if publisher is not None:
            publisher.close()
        for p in self.persistent:
            if p.home == index and p.client is not None:
                p.client.close()
                p.client = None

    # ------------------------------------------------------------------------------------------------ persistent

    def _take(self, p: Persistent, packet_budget: int = 400, wait: float = 0.005) -> None:
        """Read what has arrived for `p` (at most `packet_budget` packets), acknowledging each."""
        client = p.client
        assert client is not None
        for _ in range(packet_budget):
            try:
                packet = client.recv(wait)
            except TimeoutError:
                return
            if packet.type == PUBLISH:
                p.received.add(bytes(packet.payload).decode())
                self.counts["received"] += 1
                client.ack(packet)
            elif packet.type == PUBREL:
                client.ack(packet)

    def _online(self, p: Persistent) -> None:
        client = self._connect(p.home, p.client_id, p.version, clean=False)
        p.client = client
        if not p.subscribed:
            client.subscribe((p.topic, p.qos), timeout=10.0)
            p.subscribed = True
        self.counts["resumes"] += 1

    def subscribe_all(self) -> None:
        """Before the run: every persistent session made and subscribed on its node (then left online)."""
        for p in self.persistent:
            self._online(p)

    def persistent_round(self) -> None:
        for p in self.persistent:
            if p.home not in self.serving:
                continue
            try:
                if p.client is None:
                    if self.rng.random() < 0.5:
                        self._online(p)
                        self._take(p)
                    continue
                self._take(p)
                roll = self.rng.random()
                if roll < 0.08:
                    p.client.disconnect()  # offline: the broker queues for it
                    p.client = None
                    self.counts["offline"] += 1
                elif roll < 0.12:
                    self._churn_subscription(p)
            except FAILURES as exc:
                self._fail("persistent", exc)
                if p.client is not None:
                    p.client.close()
                    p.client = None

    def _churn_subscription(self, p: Persistent) -> None:
        assert p.client is not None
        new = f"soak/extra/{p.client_id}/{self.rng.randrange(1000)}"
        p.client.subscribe((new, self.rng.choice((0, 1))), timeout=10.0)
        if p.extra is not None and p.extra != new:
            p.client.send(enc_unsubscribe(p.client.next_id(), [p.extra], p.version))
            p.client.expect(UNSUBACK, 10.0)
        p.extra = new
        self.counts["subscription_changes"] += 1

    def drain_all(self, deadline_s: float) -> None:
        """At the end: every session online on its node until it has everything counted for it (or the deadline)."""
        end = time.monotonic() + deadline_s
        for _ in range(100_000):
            missing = [p for p in self.persistent if p.expected - p.received]
            if not missing or time.monotonic() >= end:
                return
            for p in missing:
                try:
                    if p.client is None:
                        self._online(p)
                    self._take(p, wait=0.05)
                except FAILURES as exc:
                    self._fail("drain", exc)
                    if p.client is not None:
                        p.client.close()
                        p.client = None
                    time.sleep(0.2)

    def lost(self) -> dict[str, list[str]]:
        """Per session, the acknowledged messages it never received: payload @ seconds into the run / publisher's
        node -> session's node."""
        return {p.client_id: [f"{m} @{self.acked_at[m][0]:.1f}s n{self.acked_at[m][1] + 1}->n{p.home + 1}"
                              for m in sorted(p.expected - p.received)]
                for p in self.persistent if p.expected - p.received}

    # ------------------------------------------------------------------------------------------------ traffic

    def _publisher(self, index: int) -> RawClient:
        client = self.publishers.get(index)
        if client is None:
            client = self.publishers[index] = self._connect(index, f"soak-pub-{index}-{self._next()}")
        return client

    def _acknowledged(self, client: RawClient, topic: str, payload: str, qos: int, retain: bool = False) -> bool:
        """Publish at QoS 1/2; whether the broker took the message (a success code in PUBACK / PUBREC)."""
        pid = client.next_id()
        client.send(enc_publish(topic, payload, qos, retain, packet_id=pid, version=client.version))
        if qos == 1:
            ack = client.expect(PUBACK, 15.0)
            return ack.packet_id == pid and (ack.reason_code or 0) < 0x80
        rec = client.expect(PUBREC, 15.0)
        if rec.packet_id != pid or (rec.reason_code or 0) >= 0x80:
            return False
        client.send(enc_ack(PUBREL, pid, client.version))
        client.expect(PUBCOMP, 15.0)
        return True

    def traffic_round(self, messages: int = 6, retained: int = 2) -> None:
        serving = sorted(self.serving)
        if not serving:
            return
        for _ in range(messages):
            index = self.rng.choice(serving)
            p = self.rng.choice(self.persistent)
            payload = f"{p.client_id}:{self._next()}"
            try:
                if self._acknowledged(self._publisher(index), p.topic, payload, p.qos):
                    p.expected.add(payload)
                    self.acked_at[payload] = (time.monotonic() - self.t0, index)
                    self.counts[f"acked_qos{p.qos}"] += 1
                else:
                    self.counts["refused"] += 1
            except FAILURES as exc:
                self._fail("publish", exc)
                publisher = self.publishers.pop(index, None)
                if publisher is not None:
                    publisher.close()
        for _ in range(retained):
            index = self.rng.choice(serving)
            topic = f"soak/retained/{self.rng.randrange(RETAINED_TOPICS)}"
            body = "" if self.rng.random() < 0.1 else "r" * self.rng.randrange(20, 400)
            try:
                self._acknowledged(self._publisher(index), topic, body, 1, retain=True)
                self.counts["retained_updates"] += 1
            except FAILURES as exc:
                self._fail("retained", exc)
                publisher = self.publishers.pop(index, None)
                if publisher is not None:
                    publisher.close()

    def churn_round(self) -> None:
        """One short-lived clean client: connect, subscribe, QoS 0 publishes, unsubscribe, disconnect."""
        serving = sorted(self.serving)
        if not serving:
            return
        index = self.rng.choice(serving)
        version = self.rng.choice((4, 5))
        try:
            client = self._connect(index, f"soak-c-{self._next()}", version)
        except FAILURES as exc:
            self._fail("churn connect", exc)
            return
        try:
            filters = [f"soak/q0/{self.rng.randrange(20)}", "soak/q0/+/x", f"soak/retained/{self.rng.randrange(40)}"]
            client.subscribe(*[(f, 0) for f in filters], timeout=10.0)
            for _ in range(self.rng.randrange(1, 6)):
                client.send(enc_publish(f"soak/q0/{self.rng.randrange(20)}", b"q0" * 20, 0, version=version))
                self.counts["qos0"] += 1
            client.send(enc_unsubscribe(client.next_id(), filters, version))
            client.expect(UNSUBACK, 10.0)
            self.counts["churn"] += 1
        except FAILURES as exc:
            self._fail("churn", exc)
        finally:
            client.disconnect()
