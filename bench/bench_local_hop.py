"""What a hop between two processes of one machine costs, and what a local cluster costs today (docs/scaling.md).

Run: ``.venv/bin/python -m bench.bench_local_hop [--rounds 5] [--messages 200000]`` (the hop, no broker) and
``.venv/bin/python -m bench.bench_local_hop --cluster [--rounds 3] [--duration 4]`` (one node against two nodes
on 127.0.0.11-12). Both under ``flock /tmp/vmqpy-net.lock``.

The hop. Two processes, a sender and a receiver, on a Unix stream socket or on loopback TCP. The sender builds
each message as a node forwards a publish (``Message`` -> ``forward_record``), packs ``batch`` of them into one
FORWARD frame (``pack_batch``, ``encode_frame``), seals it with the link's HMAC tag (``FrameSealer``) and writes
it with one ``sendall``; the receiver reads, checks the tags (``FrameDecoder`` with a ``FrameOpener``), unpacks
the batch and turns every record back into a ``Message`` (``parse_forward``). Batch 1 is one frame and one system
call per message. Blocking sockets, no event loop: this is the floor of a hop, what a node adds on top is in the
cluster figures. Each side reads its own utime + stime from /proc/self/stat around its work; the rate is the
receiver's messages over its time from the first byte to the last message. Medians of ``--rounds`` rounds.

The local cluster (``--cluster``). A standalone node (127.0.0.13) and a two-node cluster (127.0.0.11 and .12,
joined with vmq-admin) run side by side; rounds alternate between them. The load generator (bench.loadgen, 64-byte
payloads, pairs each on its own topic) runs four worker processes. Against one node all four connect to it;
against two nodes the workers' publishers and subscribers are split as n1->n1, n2->n2, n1->n2, n2->n1: each node
holds half of the clients and half of the pairs cross nodes. Per run: delivered msgs/s in the window and the CPU
seconds of the node processes under test (/proc/PID/stat, all of them summed) per delivered message.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import multiprocessing.connection
import os
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.loadgen import Scenario, monotonic_ns, summarize
from bench.loadgen.runner import _recv_all  # the controller's wait for every worker, reused as is
from bench.loadgen.worker import READY_TIMEOUT, run_worker
from vmqpy.cluster.forwarding import pack_batch, unpack_batch
from vmqpy.cluster.frame_auth import FrameOpener, FrameSealer
from vmqpy.cluster.framing import NEED_DATA, FrameDecoder, FrameType, encode_frame
from vmqpy.sessions.message import Message
from vmqpy.sessions.records import forward_record, parse_forward

TICKS = os.sysconf("SC_CLK_TCK")
KEY = bytes(range(32))  # the HMAC key of the bench link (both ends know it; nothing secret)
MAX_FRAME = 64 << 20
Address = tuple[str, int]


def stat_cpu_seconds(stat: str, ticks: int = TICKS) -> float:
    """utime + stime of a /proc/PID/stat line, in seconds (fields 14 and 15; the name in parentheses may hold
    spaces and parentheses, so fields are counted after its last ')')."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def process_cpu_seconds(pid: int | str = "self") -> float:
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def batch_sizes(messages: int, batch: int) -> list[int]:
    """How many messages go in each frame: `messages` split into frames of `batch`, the last one shorter."""
    if messages < 0 or batch < 1:
        raise ValueError("messages must be >= 0 and batch >= 1")
    full, rest = divmod(messages, batch)
    return [batch] * full + ([rest] if rest else [])


def split_routes(first: Address, second: Address) -> list[tuple[Address, Address]]:
    """(publishers' node, subscribers' node) of the four load generator workers against a two-node cluster: each
    node holds half of the clients, half of the pairs cross nodes."""
    return [(first, first), (second, second), (first, second), (second, first)]


# ---------------------------------------------------------------- the hop


def _receiver(conn: multiprocessing.connection.Connection, family: str, address: str | Address, messages: int) -> None:
    server = socket.socket(socket.AF_UNIX if family == "unix" else socket.AF_INET, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(1)
    conn.send(("listening", server.getsockname()))
    link, _ = server.accept()
    server.close()
    decoder = FrameDecoder(MAX_FRAME)
    decoder.authenticate(FrameOpener(KEY))
    got = 0
    first = link.recv(1 << 18)  # wait for the first byte before the clock starts
    cpu0, t0 = process_cpu_seconds(), time.monotonic()
    data = first
    for _ in range(10 * messages + 1000):  # bounded: every read brings at least one byte of some frame
        if not data:
            break
        decoder.receive_data(data)
        while (frame := decoder.next_frame()) is not NEED_DATA:
            for _seq, record in unpack_batch(frame.body)[2]:
                parse_forward(record)
                got += 1
        if got >= messages:
            break
        data = link.recv(1 << 18)
    elapsed, cpu = time.monotonic() - t0, process_cpu_seconds() - cpu0
    link.close()
    conn.send(("done", got, elapsed, cpu))


def _sender(conn: multiprocessing.connection.Connection, family: str, address: str | Address, messages: int,
            batch: int) -> None:
    link = socket.socket(socket.AF_UNIX if family == "unix" else socket.AF_INET, socket.SOCK_STREAM)
    link.connect(address)
    if family == "tcp":
        link.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as the cluster's links
    sealer = FrameSealer(KEY)
    payload = b"x" * 64
    cpu0 = process_cpu_seconds()
    seq = 0
    for size in batch_sizes(messages, batch):
        entries: list[object] = []
        for _ in range(size):
            seq += 1
            message = Message(f"bench/hop/{seq % 10}", payload, 1, False, "publisher-1")
            entries += [seq, forward_record(message, [])[0]]
        link.sendall(sealer.seal(encode_frame(FrameType.FORWARD, pack_batch(7, seq - size + 1, entries))))
    cpu = process_cpu_seconds() - cpu0
    link.shutdown(socket.SHUT_WR)
    link.close()
    conn.send(("done", cpu))


@dataclass(frozen=True)
class HopRound:
    rate: float  # messages per second at the receiver
    sender_us: float  # sender CPU per message, microseconds
    receiver_us: float


def hop_round(family: str, messages: int, batch: int, workdir: Path) -> HopRound:
    """One sender and one receiver process, `messages` messages in frames of `batch`."""
    ctx = multiprocessing.get_context("spawn")
    address: str | Address = str(workdir / "hop.sock") if family == "unix" else ("127.0.0.1", 0)
    if isinstance(address, str) and os.path.exists(address):
        os.unlink(address)
    rx_parent, rx_child = ctx.Pipe()
    tx_parent, tx_child = ctx.Pipe()
    receiver = ctx.Process(target=_receiver, args=(rx_child, family, address, messages), daemon=True)
    receiver.start()
    sender = None
    try:
        if not rx_parent.poll(30):
            raise TimeoutError("the receiver did not listen in time")
        _, bound = rx_parent.recv()
        target = bound if family == "unix" else tuple(bound)
        sender = ctx.Process(target=_sender, args=(tx_child, family, target, messages, batch), daemon=True)
        sender.start()
        if not tx_parent.poll(120) or not rx_parent.poll(120):
            raise TimeoutError("the hop did not finish in time")
        _, tx_cpu = tx_parent.recv()
        _, got, elapsed, rx_cpu = rx_parent.recv()
        if got != messages:
            raise RuntimeError(f"the receiver got {got} of {messages} messages")
        return HopRound(got / elapsed, tx_cpu / got * 1e6, rx_cpu / got * 1e6)
    finally:
        for proc in (sender, receiver):
            if proc is not None:
                proc.join(10)
                if proc.is_alive():
                    proc.terminate()  # this child's PID only
                    proc.join(5)


def hop(rounds: int, messages: int, batches: Sequence[int]) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-hop-"))
    results: dict[tuple[str, int], list[HopRound]] = {}
    try:
        for _ in range(rounds):  # interleaved: every case once per round
            for family in ("unix", "tcp"):
                for batch in batches:
                    count = messages if batch > 1 else messages // 4
                    results.setdefault((family, batch), []).append(hop_round(family, count, batch, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"# local hop: FORWARD frames as the cluster's links carry them (msgpack batch, HMAC tag), 64-byte "
          f"payloads, one sender and one receiver process, medians of {rounds} rounds\n")
    print("| socket | messages per frame | msgs/s | sender CPU per message | receiver CPU per message | "
          "both sides |")
    print("|---|---:|---:|---:|---:|---:|")
    for (family, batch), values in results.items():
        rate = statistics.median(v.rate for v in values)
        tx = statistics.median(v.sender_us for v in values)
        rx = statistics.median(v.receiver_us for v in values)
        both = statistics.median(v.sender_us + v.receiver_us for v in values)
        print(f"| {family} | {batch} | {rate:,.0f} | {tx:.2f} us | {rx:.2f} us | {both:.2f} us |")


# ---------------------------------------------------------------- the local cluster


def run_routes(routes: list[tuple[Address, Address]], scenario: Scenario, duration: float, warmup: float,
               probe: Callable[[], float], drain: float = 5.0) -> tuple[float, float, int]:
    """One load generator run with one worker process per route (publishers' node, subscribers' node):
    (delivered msgs/s in the window, node CPU seconds per delivered message, acknowledged messages lost)."""
    tag = f"bench/hop{os.getpid()}x{time.monotonic_ns()}"
    plan = scenario.plan(tag, len(routes))
    ctx = multiprocessing.get_context("spawn")
    feedback = ctx.RawArray("q", scenario.clients)
    workers, conns = [], []
    try:
        for (pubs, subs), (pub_addr, sub_addr) in zip(plan, routes, strict=True):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=run_worker, args=(child, *pub_addr, pubs, subs, feedback, sub_addr),
                               daemon=True)
            proc.start()
            child.close()
            workers.append(proc)
            conns.append(parent)
        _recv_all(conns, "ready", time.monotonic() + READY_TIMEOUT)
        t0 = monotonic_ns() + 300_000_000
        w0, w1 = t0 + int(warmup * 1e9), t0 + int((warmup + duration) * 1e9)
        for c in conns:
            c.send(("start", t0, w0, w1, drain))
        time.sleep(max(0.0, (w0 - monotonic_ns()) / 1e9))
        b0 = probe()
        time.sleep(max(0.0, (w1 - monotonic_ns()) / 1e9))
        b1 = probe()
        done = _recv_all(conns, "pubs_done", time.monotonic() + warmup + duration + drain + 30)
        for c in conns:
            c.send(("expected", {r.pub_id: r.sent for msg in done for r in msg[1]}))
        final = _recv_all(conns, "result", time.monotonic() + drain + 30)
        result = summarize(scenario.name, scenario.qos, duration, [r for m in done for r in m[1]],
                           [r for m in final for r in m[1]], sum(m[2] for m in done))
        return result.rate, (b1 - b0) / max(1, result.delivered_in_window), result.acked_lost
    finally:
        for c in conns:
            c.close()
        for proc in workers:
            proc.join(5)
            if proc.is_alive():
                proc.terminate()  # this worker's PID only
                proc.join(5)


def local_cluster(rounds: int, duration: float, pairs: int) -> None:
    # The integration tests' node harness, imported at run time: `mypy --strict tests/unit` (which reaches this
    # module through its unit test) does not hold the integration helpers to its rules.
    harness: Any = importlib.import_module("tests.integration.cluster")
    ClusterNode, join_all = harness.ClusterNode, harness.join_all

    tmp = Path(tempfile.mkdtemp(prefix="bench-local-cluster-"))
    extra = {"log.console.level": "warning"}
    pair = [ClusterNode(i, tmp, extra) for i in (1, 2)]
    single = ClusterNode(3, tmp, extra)
    nodes = [*pair, single]
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    lost = 0
    try:
        for node in nodes:
            node.start()
        join_all(pair)

        def cpu_of(group: list[Any]) -> Callable[[], float]:
            return lambda: sum(process_cpu_seconds(n.proc.pid) for n in group if n.proc is not None)

        addr = [(n.host, n.mqtt_port) for n in nodes]
        layouts = {"one node": ([(addr[2], addr[2])] * 4, cpu_of([single])),
                   "two nodes": (split_routes(addr[0], addr[1]), cpu_of(pair))}
        for _ in range(rounds):
            for qos in (0, 1):
                scenario = Scenario(f"qos{qos}-pairs{pairs}", "pairs", pairs, qos)
                for name, (routes, probe) in layouts.items():
                    rate, cpu, acked_lost = run_routes(routes, scenario, duration, 1.0, probe)
                    lost += acked_lost
                    results.setdefault((qos, name), []).append((rate, cpu))
    finally:
        for node in nodes:
            node.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# one node vs a two-node local cluster on {os.cpu_count()} cores: {pairs} pairs, 64-byte payloads, "
          f"4 load generator processes; two nodes: clients split across them, half the pairs cross nodes; "
          f"medians of {rounds} alternating rounds of {duration:g} s\n")
    print("| QoS | layout | delivered msgs/s | node CPU per message (all nodes) | rounds (msgs/s) |")
    print("|---|---|---:|---:|---|")
    for (qos, name), values in results.items():
        rate = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        shown = ", ".join(f"{v[0]:,.0f}" for v in values)
        print(f"| {qos} | {name} | {rate:,.0f} | {cpu * 1e6:.1f} us | {shown} |")
    if lost:
        print(f"\n!! {lost} acknowledged QoS 1 messages lost")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", action="store_true", help="one node vs two nodes instead of the bare hop")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5 for the hop, 3 for --cluster)")
    parser.add_argument("--messages", type=int, default=200_000, help="hop: messages per batched round")
    parser.add_argument("--batches", default="1,8,64", help="hop: messages per frame, comma-separated")
    parser.add_argument("--duration", type=float, default=4.0, help="--cluster: seconds per run")
    parser.add_argument("--pairs", type=int, default=12,
                        help="--cluster: publisher/subscriber pairs (a multiple of 4 splits them evenly)")
    args = parser.parse_args()
    if args.cluster:
        local_cluster(args.rounds or 3, args.duration, args.pairs)
    else:
        batches = [int(b) for b in args.batches.split(",")]
        if args.messages < 1 or any(b < 1 for b in batches):
            parser.error("--messages and every batch must be >= 1")
        hop(args.rounds or 5, args.messages, batches)


if __name__ == "__main__":
    main()
