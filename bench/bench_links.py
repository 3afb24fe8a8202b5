"""Node-link figures on loopback: ``python -m bench.bench_links`` (``--quick`` for a smoke run).

(a) Throughput of METADATA frames (100 B and 1 KiB bodies) from one ClusterNetwork to another. The receiver
    runs in its own process (``python -m bench.bench_links --receiver``), as a peer node would, so each end
    has its own core; both run uvloop. The sender is told the count by a CONTROL frame, sends the frames as
    fast as `send_frame` accepts them (when the 10 MiB outgoing buffer is full it waits 1 ms and retries),
    and the clock stops when the receiver's CONTROL "done" comes back: frames/s = N / elapsed,
    MB/s = N * body / elapsed / 1e6. Median of `--runs` runs.
(c) (``--auth-only`` prints only this) The CPU cost of frame authentication alone, in this process: sealing
    (``FrameSealer.seal``) and checking (``FrameOpener.open``) one METADATA frame of 100 B and 1 KiB, median of 5
    repetitions of 100,000 frames, beside encoding the same frame (``encode_frame``) for scale.
(b) Time to detect a silent peer with detect_timeout 1 s: a fake peer (a sans-I/O Link on a raw socket)
    heartbeats normally for a while, then stops sending anything while keeping the socket open; measured from
    its last frame written to the `on_reachability(peer, False)` callback. Median of 5.

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import uvloop

from vmqpy import logconfig
from vmqpy.cluster.frame_auth import TAG_SIZE, FrameOpener, FrameSealer
from vmqpy.cluster.framing import FrameType, encode_frame
from vmqpy.cluster.link import Established, Link
from vmqpy.cluster.tcp import ClusterNetwork

COOKIE = "bench-cookie"
SENDER_HOST = "127.0.0.11"
RECEIVER_HOST = "127.0.0.12"
FAKE_HOST = "127.0.0.13"


# ---------------------------------------------------------------------------------------------- receiver process


async def receiver_main() -> None:
    net = ClusterNetwork("receiver", 1, COOKIE, (RECEIVER_HOST, 0))
    state: dict[str, Any] = {"expect": -1, "count": 0, "cpu": 0.0}

    def on_metadata(peer: str, data: bytes) -> None:
        state["count"] += 1
        if state["count"] == state["expect"]:
            cpu = time.process_time() - state["cpu"]
            net.send_frame(peer, FrameType.CONTROL, {"done": state["count"], "cpu": cpu})

    def on_message(peer: str, frame_type: FrameType, body: Any) -> None:
        if frame_type is FrameType.CONTROL and "expect" in body:
            state["expect"] = body["expect"]
            state["count"] = 0
            state["cpu"] = time.process_time()

    net.set_receiver(on_metadata)
    net.on_message(on_message)
    await net.start()
    print(f"{net.bound_address()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed: asyncio.Future[None] = loop.create_future()

    def on_stdin() -> None:
        if not stdin_closed.done():
            stdin_closed.set_result(None)

    loop.add_reader(sys.stdin.fileno(), on_stdin)
    await stdin_closed  # the parent closes our stdin to stop us
    await net.stop()


# ---------------------------------------------------------------------------------------------- throughput


async def throughput(port: int, sizes: list[tuple[int, int]], runs: int) -> list[dict[str, Any]]:
    net = ClusterNetwork("sender", 1, COOKIE, (SENDER_HOST, 0))
    done: asyncio.Queue[tuple[int, float]] = asyncio.Queue()
    net.on_message(
        lambda peer, t, body: done.put_nowait((body["done"], body["cpu"])) if t is FrameType.CONTROL else None
    )
    await net.start()
    net.add_peer("receiver", RECEIVER_HOST, port)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while "receiver" not in net.reachable():
        if loop.time() > deadline:
            raise RuntimeError("no link to the receiver")
        await asyncio.sleep(0.01)
    rows = []
    for body_size, count in sizes:
        body = os.urandom(body_size)
        rates, send_cpu, receive_cpu = [], [], []
        for _ in range(runs):
            net.send_frame("receiver", FrameType.CONTROL, {"expect": count})
            start = time.perf_counter()
            cpu_start = time.process_time()
            sent = retries = 0
            while sent < count:
                if net.send_frame("receiver", FrameType.METADATA, body):
                    sent += 1
                    if sent % 512 == 0:
                        await asyncio.sleep(0)  # let the loop write
                else:
                    retries += 1
                    await asyncio.sleep(0.001)  # outgoing buffer full: let it drain
            got, receiver_cpu = await asyncio.wait_for(done.get(), 120)
            elapsed = time.perf_counter() - start
            assert got == count
            rates.append(count / elapsed)
            send_cpu.append((time.process_time() - cpu_start) / count * 1e6)
            receive_cpu.append(receiver_cpu / count * 1e6)
        rate = statistics.median(rates)
        frame = len(encode_frame(FrameType.METADATA, body)) + TAG_SIZE  # every frame carries its tag
        rows.append(
            {
                "body": body_size,
                "frame": frame,
                "count": count,
                "frames_s": rate,
                "mb_s": rate * body_size / 1e6,
                "min": min(rates),
                "max": max(rates),
                "send_us": statistics.median(send_cpu),
                "receive_us": statistics.median(receive_cpu),
            }
        )
    await net.stop()
    return rows


# ---------------------------------------------------------------------------------------------- detection


async def detect_once(name: str, detect_timeout: float, alive_for: float) -> float:
    """Seconds from the fake peer's last frame to the watcher's on_reachability(False)."""
    net = ClusterNetwork("watcher", 1, COOKIE, (SENDER_HOST, 0), detect_timeout=detect_timeout)
    loop = asyncio.get_running_loop()
    down: asyncio.Future[float] = loop.create_future()
    net.on_reachability(lambda peer, up: None if up or down.done() else down.set_result(time.perf_counter()))
    await net.start()
    reader, writer = await asyncio.open_connection(*net.bound_address(), local_addr=(FAKE_HOST, 0))
    fake = Link(name, 1, COOKIE, "watcher", os.urandom(16), detect_timeout, 1 << 20, now=loop.time())
    writer.write(fake.data_to_send())
    established = False
    while not established:
        data = await asyncio.wait_for(reader.read(65536), 10)
        established = any(isinstance(e, Established) for e in fake.receive_data(data, loop.time()))
        writer.write(fake.data_to_send())
    last_write = time.perf_counter()
    # heartbeat normally for a while (reading what the watcher sends), then go silent
    stop_at = loop.time() + alive_for
    while loop.time() < stop_at:
        timer = fake.get_timer()
        if timer is not None:
            await asyncio.sleep(max(0.0, min(timer, stop_at) - loop.time()))
            fake.handle_timer(loop.time())
        out = fake.data_to_send()
        if out:
            writer.write(out)
            last_write = time.perf_counter()
        try:
            fake.receive_data(await asyncio.wait_for(reader.read(65536), 0.001), loop.time())
        except TimeoutError:
            pass
    detected = await asyncio.wait_for(down, detect_timeout * 5)
    writer.close()
    await net.stop()
    return detected - last_write


async def detection(detect_timeout: float, samples: int, alive_for: float) -> list[float]:
    return [await detect_once(f"fake{i}", detect_timeout, alive_for) for i in range(samples)]


# ---------------------------------------------------------------------------------------------- auth cost


def auth_cost(sizes: tuple[int, ...] = (100, 1024), count: int = 100_000, repeats: int = 5) -> list[str]:
    """Markdown rows: per-frame microseconds of encode, seal and open (median of `repeats`)."""
    key = os.urandom(32)
    rows = []
    for size in sizes:
        body = os.urandom(size)
        frame = encode_frame(FrameType.METADATA, body)
        encode_us, seal_us, open_us = [], [], []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(count):
                encode_frame(FrameType.METADATA, body)
            encode_us.append((time.perf_counter() - start) / count * 1e6)
            sealer, opener = FrameSealer(key), FrameOpener(key)
            start = time.perf_counter()
            sealed = [sealer.seal(frame) for _ in range(count)]
            seal_us.append((time.perf_counter() - start) / count * 1e6)
            start = time.perf_counter()
            for one in sealed:
                opener.open(one[:-TAG_SIZE], one[-TAG_SIZE:])
            open_us.append((time.perf_counter() - start) / count * 1e6)
        rows.append(f"| {size} B | {statistics.median(encode_us):.2f} us | {statistics.median(seal_us):.2f} us | "
                    f"{statistics.median(open_us):.2f} us |")
    return rows


def print_auth_cost() -> None:
    print("| METADATA body | encode_frame | seal (tag) | open (check) |")
    print("|---|---|---|---|")
    for row in auth_cost():
        print(row)


# ---------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts, one run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--auth-only", action="store_true", help="only (c): the CPU cost of frame authentication")
    args = parser.parse_args()
    if args.auth_only:
        print_auth_cost()
        return
    logconfig.configure("console", "warning")  # warnings to stderr; stdout carries the receiver's port and the table
    if args.receiver:
        uvloop.run(receiver_main())
        return
    runs = 1 if args.quick else args.runs
    sizes = [(100, 20_000), (1024, 10_000)] if args.quick else [(100, 300_000), (1024, 150_000)]
    samples = 2 if args.quick else 5
    receiver = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_links", "--receiver"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        rows = uvloop.run(throughput(port, sizes, runs))
    finally:
        assert receiver.stdin is not None
        receiver.stdin.close()
        try:
            receiver.wait(10)
        except subprocess.TimeoutExpired:
            receiver.kill()
            receiver.wait()
    detect = uvloop.run(detection(1.0, samples, 0.3 if args.quick else 1.5))

    print(f"Node links on loopback, uvloop, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"median of {runs} run(s); sender and receiver in separate processes.\n")
    print("| METADATA body | frame on the wire | frames | frames/s | MB/s (bodies) | range frames/s "
          "| sender CPU/frame | receiver CPU/frame |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['body']} B | {row['frame']} B | {row['count']:,} | {row['frames_s']:,.0f} | "
            f"{row['mb_s']:.1f} | {row['min']:,.0f} .. {row['max']:,.0f} | {row['send_us']:.2f} us "
            f"| {row['receive_us']:.2f} us |"
        )
    print()
    print_auth_cost()
    print()
    print("| silent peer, detect_timeout 1 s | median | min | max | samples |")
    print("|---|---|---|---|---|")
    print(
        f"| last frame written -> on_reachability(False) | {statistics.median(detect):.3f} s | "
        f"{min(detect):.3f} s | {max(detect):.3f} s | {len(detect)} |"
    )


if __name__ == "__main__":
    main()
