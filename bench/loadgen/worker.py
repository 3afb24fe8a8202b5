"""One worker process of a run: connects its share of the clients, then follows the controller (`runner`) over a
pipe through the timeline of the run, and sends back what its clients counted.

Messages on the pipe, in order (worker -> controller unless marked):
  ("ready", pid)                              every client connected and subscribed
  <- ("start", t0, w0, w1, drain_s)           publishers start at t0; the window is w0..w1 (monotonic ns)
  ("pubs_done", [PubResult], sent_in_window)  publishers stopped; QoS 1 ones got their PUBACKs or the drain ended
  <- ("expected", {pub_id: sent})             what the subscribers should see
  ("result", [SubResult], cpu %)              subscribers complete, or the drain ended
  ("error", traceback)                        instead of any of the above, when something failed
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing.connection
import os
import time
import traceback
from functools import partial
from typing import Any

from bench.loadgen.clients import CONNECT_TIMEOUT, Publisher, Subscriber, monotonic_ns
from bench.loadgen.paced import PacedPublisher
from bench.loadgen.wire import ClientError

READY_TIMEOUT = 60.0
QOS0_IDLE_DRAIN = 1.0  # a QoS 0 drain ends after this long without any delivery


async def _sleep_until(t_ns: int) -> None:
    delay = (t_ns - monotonic_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


async def _run_clients(conn: multiprocessing.connection.Connection, host: str, port: int,
                       pub_specs: list[dict[str, Any]], sub_specs: list[dict[str, Any]], feedback: Any,
                       sub_addr: tuple[str, int] | None = None) -> None:
    loop = asyncio.get_running_loop()
    sub_host, sub_port = sub_addr if sub_addr is not None else (host, port)

    async def recv(timeout: float) -> Any:
        ready = await loop.run_in_executor(None, conn.poll, timeout)
        if not ready:
            raise TimeoutError("no command from the controller")
        return conn.recv()

    subs: list[Subscriber] = []
    pubs: list[Publisher] = []
    try:
        for s in sub_specs:
            _, sub = await asyncio.wait_for(loop.create_connection(
                partial(Subscriber, s["sub_id"], s["filter"], s["qos"], s["sources"], feedback, s.get("slot")),
                sub_host, sub_port),
                CONNECT_TIMEOUT)
            subs.append(sub)
            sub.by_due_time = bool(s.get("by_due_time"))
            await sub.connect(s["client_id"])
            await sub.subscribe(s["filter"], s["qos"])
        for p in pub_specs:
            if p.get("rate"):
                factory: Any = partial(PacedPublisher, p["pub_id"], p["topic"], p["qos"], p["rate"],
                                       p["publishers"], p["window"], feedback, slots=p.get("slots"))
            else:
                factory = partial(Publisher, p["pub_id"], p["topic"], p["qos"], p["window"], p["batch"], feedback,
                                  p.get("slots"))
            _, pub = await asyncio.wait_for(loop.create_connection(factory, host, port), CONNECT_TIMEOUT)
            pubs.append(pub)
            await pub.connect(p["client_id"])
        conn.send(("ready", os.getpid()))
        cmd, t0, w0, w1, drain_s = await recv(READY_TIMEOUT)
        if cmd != "start":
            raise ClientError(f"unexpected command {cmd!r}")
        for sub in subs:
            sub.w0, sub.w1 = w0, w1
        for pub in pubs:
            pub.w0 = w0
        await _sleep_until(t0)
        floods: list[asyncio.Future[None]] = []
        for pub in pubs:
            if isinstance(pub, PacedPublisher):
                floods.append(pub.begin(t0, w1))
            elif pub.qos == 0:
                floods.append(asyncio.ensure_future(pub.flood(w1)))
            else:
                pub.start_window()
        await _sleep_until(w0)
        cpu0 = time.process_time()
        await _sleep_until(w1)
        cpu1 = time.process_time()
        cpu = 100.0 * (cpu1 - cpu0) / ((w1 - w0) / 1e9)
        for pub in pubs:
            pub.stop()
        drain_end = w1 + int(drain_s * 1e9)
        if floods:
            await asyncio.wait(floods, timeout=max(0.1, (drain_end - monotonic_ns()) / 1e9))
            for f in floods:
                if f.done() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        waits = [pub.idle for pub in pubs if pub.qos == 1]
        if waits:
            await asyncio.wait(waits, timeout=max(0.1, (drain_end - monotonic_ns()) / 1e9))
        conn.send(("pubs_done", [pub.result() for pub in pubs], sum(pub.sent_in_window for pub in pubs)))
        cmd, expected = await recv(READY_TIMEOUT + drain_s)
        if cmd != "expected":
            raise ClientError(f"unexpected command {cmd!r}")
        sub_deadline = max(drain_end, monotonic_ns() + 500_000_000)
        for _ in range(1 << 30):  # bounded by sub_deadline
            if all(sub.complete(expected) for sub in subs):
                break
            now = monotonic_ns()
            if now >= sub_deadline:
                break
            if subs and all(sub.qos == 0 for sub in subs):
                last = max([sub.last_delivery for sub in subs] + [w1])
                if now - last > QOS0_IDLE_DRAIN * 1e9:
                    break
            await asyncio.sleep(0.02)
        for c in [*pubs, *subs]:
            if c.closed.done():
                c.errors.append(f"connection closed by the broker: {c.closed.result()!r}")
        conn.send(("result", [sub.result() for sub in subs], cpu))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
        raise
    finally:
        for c in [*pubs, *subs]:
            c.disconnect()
        await asyncio.sleep(0.05)


def _select_loop() -> asyncio.AbstractEventLoop:
    """asyncio's loop on select(): timeouts in microseconds (epoll's and uvloop's are in milliseconds)."""
    import selectors

    return asyncio.SelectorEventLoop(selectors.SelectSelector())


def run_worker(conn: multiprocessing.connection.Connection, host: str, port: int, pub_specs: list[dict[str, Any]],
               sub_specs: list[dict[str, Any]], feedback: Any, sub_addr: tuple[str, int] | None = None,
               precise_timers: bool = False) -> None:
    """The target of a worker process: runs its clients on uvloop, or with `precise_timers` (fixed-rate runs) on
    asyncio's select() loop; then exits the process (status 1 on failure)."""
    import uvloop

    try:
        coro = _run_clients(conn, host, port, pub_specs, sub_specs, feedback, sub_addr)
        if precise_timers:
            with asyncio.Runner(loop_factory=_select_loop) as runner:
                runner.run(coro)
        else:
            uvloop.run(coro)
    except BaseException:
        os._exit(1)
    os._exit(0)
