"""What every workload shares: the endpoints, the recorder, the stop flag, and bounded worker threads."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.history import Recorder
from chaos.mqtt import Client, Result

MAX_OPS_PER_WORKER = 100_000


@dataclass(frozen=True)
class Endpoint:
    """A node as a client sees it."""

    name: str
    host: str
    port: int


@dataclass
class Context:
    recorder: Recorder
    endpoints: list[Endpoint]
    seed: int
    stop: threading.Event = field(default_factory=threading.Event)
    pace_s: float = 0.15  # pause between two operations of one worker
    # where the cluster says a client id's session lives (the node's name; None: nowhere, or it cannot say)
    locate: Callable[[str], str | None] = field(default=lambda _client_id: None)

    def rng(self, worker: str) -> random.Random:
        return random.Random(f"{self.seed}/{worker}")


class Workload:
    """Base: subclasses define `worker(ctx, index)` and how many workers run."""

    name = "workload"
    workers = 1

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def setup(self, ctx: Context) -> None:
        """Before the nemesis starts (the cluster is healthy)."""

    def start(self, ctx: Context) -> None:
        for index in range(self.workers):
            thread = threading.Thread(target=self._guard, args=(ctx, index), name=f"{self.name}-{index}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def _guard(self, ctx: Context, index: int) -> None:
        try:
            self.worker(ctx, index)
        except Exception as exc:  # a worker bug must not hang the run; it is reported in the verdict
            self.errors.append(f"{self.name}-{index}: {type(exc).__name__}: {exc}")

    def worker(self, ctx: Context, index: int) -> None:
        raise NotImplementedError

    def join(self, timeout_s: float = 30.0) -> None:
        end = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.1, end - time.monotonic()))

    def finish(self, ctx: Context) -> None:
        """After the heal and the quiet period."""


def record_op(ctx: Context, process: str, f: str, value: object, node: str, op: Callable[[], Result],
              result_value: object = None) -> Result:
    """Record invoke, run `op`, record its completion (ok/fail/info) with the same value unless given."""
    ctx.recorder.record("invoke", process, f, value, node)
    result = op()
    completion = value if result_value is None else result_value
    if result.outcome == "fail" and isinstance(value, dict):
        completion = {**value, "code": result.code, "error": result.detail or None}
    elif result.outcome == "info" and isinstance(value, dict):
        completion = {**value, "error": result.detail or "unknown"}
    ctx.recorder.record(result.outcome, process, f, completion, node)
    return result


def connect_somewhere(ctx: Context, rng: random.Random, client_id: str, *, clean: bool = True,
                      expiry: int = 0, avoid: str | None = None,
                      tries: int = 20) -> tuple[Client, Endpoint] | None:
    """Connect to random nodes until one accepts (bounded); None when stopped or none did."""
    for _ in range(tries):
        if ctx.stop.is_set():
            return None
        choices = [e for e in ctx.endpoints if e.name != avoid] or ctx.endpoints
        endpoint = rng.choice(choices)
        client = Client(client_id, endpoint.host, endpoint.port, clean=clean, session_expiry=expiry)
        if client.connect().outcome == "ok":
            return client, endpoint
        ctx.stop.wait(0.3)
    return None
