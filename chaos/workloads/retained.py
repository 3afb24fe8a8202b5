"""Retained messages: clients publish retained values (and clears) to a few topics on random nodes."""

from __future__ import annotations

from functools import partial

from chaos.workloads.base import Context, Workload, connect_somewhere, record_op

TOPICS = 5


def topics() -> list[str]:
    return [f"chaos/ret/{i}" for i in range(TOPICS)]


class Retained(Workload):
    name = "retained"
    workers = 2

    def worker(self, ctx: Context, index: int) -> None:
        rng = ctx.rng(f"ret{index}")
        process = f"ret{index}"
        conn = None
        done_here = 0
        for n in range(100_000):
            if ctx.stop.is_set():
                break
            if conn is None or done_here >= 4:
                if conn is not None:
                    conn[0].disconnect()
                done_here = 0
                conn = connect_somewhere(ctx, rng, f"ret{index}", avoid=conn[1].name if conn else None)
                if conn is None:
                    continue
            client, endpoint = conn
            topic = rng.choice(topics())
            clear = rng.random() < 0.15
            msg = None if clear else f"r{index}-{n}"
            payload = b"" if msg is None else msg.encode()
            value: dict[str, object] = {"topic": topic, "msg": msg, "retain": True, "expect": []}
            result = record_op(ctx, process, "publish", value, endpoint.name,
                               partial(client.publish, topic, payload, retain=True))
            done_here += 1
            if result.outcome == "info" or not client.connected:
                client.close()
                conn = None
            ctx.stop.wait(ctx.pace_s)
        if conn is not None:
            conn[0].disconnect()
