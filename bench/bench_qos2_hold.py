"""QoS 2 delivery to one persistent subscriber of one node, two revisions side by side (the QoS 2 hold for the
barrier, docs/replication.md "The owner's loss, simulated"): 3,000 QoS 2 messages from one publisher (20 in
flight), publish-to-delivery latency measured by the subscriber, the node's CPU per message.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_qos2_hold BEFORE_REV AFTER_REV
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from bench.brokers import BrokerProcess, export_revision

N = 3000


def run(source: Path) -> dict[str, Any]:
    with BrokerProcess("vmqpy", source=source) as b:
        lat: list[float] = []
        got = threading.Event()
        count = [0]
        sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="q2sub", clean_session=False)

        def on_msg(_c: Any, _u: Any, m: mqtt.MQTTMessage) -> None:
            lat.append(time.perf_counter() - float(m.payload.decode()))
            count[0] += 1
            if count[0] >= N:
                got.set()

        sub.on_message = on_msg
        sub.connect(b.host, b.port)
        sub.loop_start()
        time.sleep(0.5)
        sub.subscribe("q2/#", 2)
        time.sleep(0.5)
        pub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="q2pub")
        pub.max_inflight_messages_set(20)
        pub.connect(b.host, b.port)
        pub.loop_start()
        time.sleep(0.3)
        cpu0 = b.cpu_seconds()
        t0 = time.perf_counter()
        infos = []
        for i in range(N):
            infos.append(pub.publish("q2/t", str(time.perf_counter()).encode(), qos=2))
            if i % 20 == 19:
                infos[-20].wait_for_publish(10)
        got.wait(60)
        wall = time.perf_counter() - t0
        cpu = b.cpu_seconds() - cpu0
        sub.loop_stop()
        pub.loop_stop()
        lat.sort()
        return {"delivered": count[0], "msgs_per_s": round(count[0] / wall),
                "cpu_us_per_msg": round(cpu / max(count[0], 1) * 1e6, 1),
                "p50_ms": round(lat[len(lat) // 2] * 1e3, 2), "p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 2)}


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="bench-qos2-"))
    sources = {name: base / name for name in ("before", "after")}
    export_revision(sys.argv[1], sources["before"])
    export_revision(sys.argv[2], sources["after"])
    for _round in range(3):  # interleaved: the machine is shared and noisy
        for name, source in sources.items():
            print(name, json.dumps(run(source)), flush=True)


if __name__ == "__main__":
    main()
