"""Persistent sessions whose clients come back anywhere: the `queues` workload (one offline persistent QoS 1
subscriber per node, published to from the other nodes, drained on its node at the end) plus a roamer that,
during the run, reconnects a random subscriber on a random node, reads what is queued for it and goes offline
again. A subscriber whose node was lost therefore reconnects elsewhere while the node is gone, which is where
the queue replicas' failover fetches its messages (docs/replication.md section 11). Every roaming visit is a
`drain` operation, judged by the same queue checker as the final drains."""

from __future__ import annotations

from chaos.mqtt import Client
from chaos.workloads.base import Context
from chaos.workloads.queues import EXPIRY_S, Queues

#: Pause between two visits of the roamer, and how long one visit reads (until this long without a message,
#: at most ROAM_LIMIT_S).
ROAM_PAUSE_S = 1.0
ROAM_QUIET_S = 0.5
ROAM_LIMIT_S = 4.0
MAX_VISITS = 10_000


class RoamingQueues(Queues):
    name = "queues-roaming"
    workers = Queues.workers + 1  # the publishers of `queues`, and the roamer

    def worker(self, ctx: Context, index: int) -> None:
        if index < Queues.workers:
            super().worker(ctx, index)
        else:
            self.roam(ctx)

    def roam(self, ctx: Context) -> None:
        rng = ctx.rng("qroam")
        process = "qroam"
        for _ in range(MAX_VISITS):
            if ctx.stop.wait(ROAM_PAUSE_S) or not self.homes:
                break
            client_id = rng.choice(sorted(self.homes))
            endpoint = rng.choice(ctx.endpoints)
            ctx.recorder.record("invoke", process, "drain", {"client": client_id}, endpoint.name)
            client = Client(client_id, endpoint.host, endpoint.port, clean=False, session_expiry=EXPIRY_S)
            connected = client.connect()
            if connected.outcome != "ok":
                ctx.recorder.record("fail", process, "drain", {"client": client_id, "error": "no connect",
                                                               "code": connected.code}, endpoint.name)
                continue
            received = client.collect(quiet=ROAM_QUIET_S, limit=ROAM_LIMIT_S)
            client.disconnect()
            msgs = [payload.decode(errors="replace") for _, payload in received]
            ctx.recorder.record("ok", process, "drain", {"client": client_id, "msgs": msgs}, endpoint.name)
