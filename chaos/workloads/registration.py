"""Registration: two processes per client id connect with the same id on random nodes and disconnect; one of
them holds its sessions up to 15 s (so that duplicates made during a partition are still live at the heal), the
other 0.5 to 3 s. Connects, server disconnects and lost connections are recorded."""

from __future__ import annotations

import time

from chaos.mqtt import Client
from chaos.workloads.base import Context, Workload

CLIENT_IDS = 2
PER_ID = 2
LONG_HOLD_S = 15.0


class Registration(Workload):
    name = "registration"
    workers = CLIENT_IDS * PER_ID

    def worker(self, ctx: Context, index: int) -> None:
        rng = ctx.rng(f"reg{index}")
        process = f"reg{index}"
        client_id = f"reg-{index % CLIENT_IDS}"
        for _ in range(100_000):
            if ctx.stop.is_set():
                break
            endpoint = rng.choice(ctx.endpoints)
            ctx.recorder.record("invoke", process, "connect", {"client": client_id}, endpoint.name)
            client = Client(client_id, endpoint.host, endpoint.port, clean=True)
            result = client.connect()
            if result.outcome != "ok":
                ctx.recorder.record(result.outcome, process, "connect",
                                    {"client": client_id, "code": result.code, "error": result.detail or None},
                                    endpoint.name)
                ctx.stop.wait(0.3 + rng.random() * 0.5)
                continue
            ctx.recorder.record("ok", process, "connect", {"client": client_id}, endpoint.name)
            hold = LONG_HOLD_S if index < CLIENT_IDS else 0.5 + rng.random() * 2.5
            end = time.monotonic() + hold
            while client.connected and not ctx.stop.is_set() and time.monotonic() < end:
                client.pump(min(0.5, end - time.monotonic()))
            if client.server_disconnected:
                ctx.recorder.record("info", process, "server-disconnect",
                                    {"client": client_id, "code": client.disconnect_code}, endpoint.name)
            elif not client.connected:
                ctx.recorder.record("info", process, "lost", {"client": client_id}, endpoint.name)
            else:
                ctx.recorder.record("invoke", process, "disconnect", {"client": client_id}, endpoint.name)
                client.disconnect()
                ctx.recorder.record("ok", process, "disconnect", {"client": client_id}, endpoint.name)
            client.close()
            ctx.stop.wait(0.1 + rng.random() * 0.3)
