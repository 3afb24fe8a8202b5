"""Load scenarios: the shape of a run (N publisher/subscriber pairs, each pair on its own topic; M publishers on
distinct topics into one subscriber on a `+` wildcard; or one publisher whose topic N subscribers share), its QoS
and windows, and how its clients are spread over the worker processes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SHAPES = ("pairs", "fanin", "fanout")


@dataclass(frozen=True)
class Scenario:
    name: str
    shape: str  # "pairs", "fanin" or "fanout"
    clients: int  # pairs, fan-in publishers, or fan-out subscribers
    qos: int
    window: int = 20  # QoS 1: PUBLISHes awaiting PUBACK per publisher
    qos0_window: int = 200  # QoS 0: messages on their way per publisher (0 = flood, no limit)
    batch: int = 32  # QoS 0 messages per write

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"unknown shape {self.shape!r}")
        if self.clients < 1 or self.qos not in (0, 1):
            raise ValueError("need at least one client and QoS 0 or 1")

    @property
    def copies(self) -> int:
        """Deliveries per published message: the fan-out's subscribers, else 1."""
        return self.clients if self.shape == "fanout" else 1

    def plan(self, tag: str, procs: int,
             rate: float | None = None) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """Clients per worker process: [(publisher specs, subscriber specs)], topics under `tag`. With `rate`
        (total deliveries per s: for a fan-out, `copies` times the published rate), fixed-rate publishers
        (`paced`) and subscribers that count by due time.

        Pairs: pair k (its publisher and its subscriber) runs in process k % procs. Fan-in: the subscriber runs
        in process 0 and the publishers round-robin in the others (in process 0 too if procs == 1). Fan-out: the
        publisher runs in process 0 and subscriber k in process k % procs; subscriber k reports what it received
        in feedback slot k, and the publisher's QoS 0 window follows the slowest of them.
        """
        procs = max(1, procs)
        out: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = [([], []) for _ in range(procs)]
        short = tag.rsplit("/", 1)[-1]
        window = self.window if self.qos else self.qos0_window

        publishers = 1 if self.shape == "fanout" else self.clients
        per_publisher_rate = None if rate is None else rate / self.copies

        def pub(i: int, topic: str) -> dict[str, Any]:
            return {"pub_id": i, "topic": topic, "qos": self.qos, "window": window, "batch": self.batch,
                    "client_id": f"b{short}p{i}", "rate": per_publisher_rate, "publishers": publishers}

        def sub(spec: dict[str, Any]) -> dict[str, Any]:
            return {**spec, "by_due_time": rate is not None}

        if self.shape == "pairs":
            for i in range(self.clients):
                topic = f"{tag}/pair/{i}"
                out[i % procs][0].append(pub(i, topic))
                out[i % procs][1].append(sub({"sub_id": i, "filter": topic, "qos": self.qos, "sources": [i],
                                              "client_id": f"b{short}s{i}"}))
        elif self.shape == "fanout":
            topic = f"{tag}/fanout"
            out[0][0].append({**pub(0, topic), "slots": list(range(self.clients))})
            for i in range(self.clients):
                out[i % procs][1].append(sub({"sub_id": i, "filter": topic, "qos": self.qos, "sources": [0],
                                              "slot": i, "client_id": f"b{short}s{i}"}))
        else:
            out[0][1].append(sub({"sub_id": 0, "filter": f"{tag}/fanin/+", "qos": self.qos,
                                  "sources": list(range(self.clients)), "client_id": f"b{short}s0"}))
            for i in range(self.clients):
                out[1 + i % (procs - 1) if procs > 1 else 0][0].append(pub(i, f"{tag}/fanin/{i}"))
        return [w for w in out if w[0] or w[1]]


def default_scenarios(pairs: int = 10, fanin: int = 10, qos0_window: int = 200,
                      fanout: int = 10) -> list[Scenario]:
    """The message scenarios of `bench.compare` (and of issue 38's table), in its order."""
    return [
        Scenario(f"qos0-pairs{pairs}", "pairs", pairs, 0, qos0_window=qos0_window),
        Scenario(f"qos1-pairs{pairs}", "pairs", pairs, 1),
        Scenario(f"qos0-fanout{fanout}", "fanout", fanout, 0, qos0_window=qos0_window),
        Scenario(f"qos1-fanout{fanout}", "fanout", fanout, 1),
        Scenario(f"qos0-fanin{fanin}", "fanin", fanin, 0, qos0_window=qos0_window),
        Scenario(f"qos1-fanin{fanin}", "fanin", fanin, 1),
    ]

