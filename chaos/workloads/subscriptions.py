"""Subscriptions: persistent clients subscribe unique filters and unsubscribe some of them, on random nodes."""

from __future__ import annotations

from functools import partial

from chaos.workloads.base import Context, Workload, connect_somewhere, record_op

EXPIRY_S = 3600


class Subscriptions(Workload):
    name = "subscriptions"
    workers = 2

    def worker(self, ctx: Context, index: int) -> None:
        rng = ctx.rng(f"sub{index}")
        process = f"sub{index}"
        generation = 0
        live: list[str] = []
        counter = 0
        conn = None
        for _ in range(100_000):
            if ctx.stop.is_set():
                break
            if conn is None:
                generation += 1
                live = []  # a new client id: its own session and filters
                conn = connect_somewhere(ctx, rng, f"sub{index}-{generation}", clean=False, expiry=EXPIRY_S)
                if conn is None:
                    continue
            client, endpoint = conn
            client_id = client.client_id
            if live and rng.random() < 0.3:
                flt = live.pop(rng.randrange(len(live)))
                result = record_op(ctx, process, "unsubscribe", {"client": client_id, "filter": flt},
                                   endpoint.name, partial(client.unsubscribe, flt))
                if result.outcome == "fail":
                    live.append(flt)
            else:
                counter += 1
                flt = f"chaos/sub/{index}/{counter}"
                result = record_op(ctx, process, "subscribe", {"client": client_id, "filter": flt},
                                   endpoint.name, partial(client.subscribe, flt))
                if result.outcome == "ok":
                    live.append(flt)
            if result.outcome == "info" or not client.connected:
                client.close()
                conn = None
            ctx.stop.wait(ctx.pace_s)
        if conn is not None:
            conn[0].disconnect()
