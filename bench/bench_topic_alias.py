"""Bytes a subscriber receives with and without outbound topic aliases, vmqpy and Mosquitto side by side.

One broker at a time (vmqpy, then Mosquitto, interleaved over rounds), one MQTT 5.0 subscriber on `alias/#`
that announces Topic Alias Maximum `tam` (0 or 64), one publisher sending N QoS 0 messages round-robin over K
topics of about 100 bytes with a 16-byte payload. Reported per broker and `tam`: bytes on the subscriber's
socket per message and the broker's CPU time per message (user + system, from /proc), medians of the rounds.
Mosquitto 2.0.11 assigns no outbound aliases: its rows are the reference for "no alias" bytes.

    .venv/bin/python -m bench.bench_topic_alias [--messages 20000] [--topics 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

from bench.brokers import BrokerProcess
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Connect, Properties, Publish, Subscribe, Subscription

PAYLOAD = b"p" * 16


def connect(port: int, client_id: str, tam: int = 0) -> tuple[socket.socket, Decoder]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    props = Properties(topic_alias_maximum=tam or None)
    sock.sendall(encode(Connect(client_id, protocol_level=5, keep_alive=60, properties=props), 5))
    decoder = Decoder(server=False, protocol_level=5)
    next_packet(sock, decoder)  # CONNACK
    return sock, decoder


def next_packet(sock: socket.socket, decoder: Decoder) -> object:
    while True:
        packet = decoder.next_packet()
        if packet is not NEED_DATA:
            return packet
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("broker closed the connection")
        decoder.receive_data(data)


def one_run(kind: str, tam: int, messages: int, topics: list[str]) -> tuple[float, float]:
    """(bytes per message on the subscriber's socket, broker CPU microseconds per message)."""
    with BrokerProcess(kind) as broker:
        sub, sub_decoder = connect(broker.port, "alias-sub", tam)
        sub.sendall(encode(Subscribe(1, [Subscription("alias/#")]), 5))
        next_packet(sub, sub_decoder)  # SUBACK
        pub, _ = connect(broker.port, "alias-pub")
        frames = [encode(Publish(topic, PAYLOAD), 5) for topic in topics]
        cpu_before = broker.cpu_seconds()
        received = 0
        got = 0
        sent = 0
        deadline = time.monotonic() + 120
        sub.settimeout(0.5)
        while got < messages and time.monotonic() < deadline:
            if sent < messages:
                batch = b"".join(frames[(sent + i) % len(frames)] for i in range(min(200, messages - sent)))
                pub.sendall(batch)
                sent += min(200, messages - sent)
            try:
                data = sub.recv(1 << 16)
            except TimeoutError:
                continue
            received += len(data)
            sub_decoder.receive_data(data)
            while sub_decoder.next_packet() is not NEED_DATA:
                got += 1
        cpu = broker.cpu_seconds() - cpu_before
        sub.close()
        pub.close()
    if got < messages:
        raise RuntimeError(f"{kind}: the subscriber got {got} of {messages} messages")
    return received / messages, cpu / messages * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    topics = [f"alias/{i:02d}/" + "segment/" * 11 + "end" for i in range(args.topics)]
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _round in range(args.rounds):
        for kind in ("vmqpy", "mosquitto"):
            for tam in (0, 64):
                results.setdefault((kind, tam), []).append(one_run(kind, tam, args.messages, topics))
    print(f"{args.messages} QoS 0 messages over {args.topics} topics of {len(topics[0])} bytes, payload "
          f"{len(PAYLOAD)} bytes, medians of {args.rounds} rounds")
    print("| broker | subscriber's Topic Alias Maximum | bytes per message | broker CPU per message |")
    print("|---|---:|---:|---:|")
    for (kind, tam), rows in results.items():
        size = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        print(f"| {kind} | {tam} | {size:.1f} | {cpu:.1f} us |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
