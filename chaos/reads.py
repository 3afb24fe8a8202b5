"""The end of a run: the final read of every node (subscriptions through the admin API, retained messages by
subscribing), and the metadata dumps for the convergence check."""

from __future__ import annotations

import json
import time
from typing import Any

from chaos.cluster import Cluster, HarnessError, Node
from chaos.history import Recorder
from chaos.mqtt import Client
from chaos.workloads.retained import topics

Reads = tuple[dict[str, dict[str, list[str]]], dict[str, dict[str, str | None]]]


def read_subscriptions(node: Node) -> dict[str, list[str]]:
    rows = node.api("subscription/show", {"limit": "1000000"})
    out: dict[str, list[str]] = {}
    for row in rows:
        out.setdefault(str(row["Client"]), []).append(str(row["Filter"]))
    return {client: sorted(filters) for client, filters in sorted(out.items())}


def read_retained(node: Node) -> dict[str, str | None]:
    client = Client(f"chaos-reader-{node.short}", node.host, node.mqtt_port, clean=True)
    if client.connect().outcome != "ok":
        raise HarnessError(f"{node.name}: the retained reader could not connect")
    try:
        if client.subscribe("chaos/ret/#").outcome != "ok":
            raise HarnessError(f"{node.name}: the retained reader could not subscribe")
        received = client.collect(quiet=1.0, limit=10.0)
    finally:
        client.disconnect()
    values: dict[str, str | None] = dict.fromkeys(topics())
    for topic, payload in received:
        values[topic] = payload.decode(errors="replace") or None
    return values


def final_reads(cluster: Cluster, recorder: Recorder) -> Reads:
    """One `read` operation per node (process `reader-NODE`): every node's subscriptions first, then every
    node's retained messages, so that the retained readers' own subscriptions are not in the first."""
    subs: dict[str, dict[str, list[str]]] = {}
    retained: dict[str, dict[str, str | None]] = {}
    failed: set[str] = set()
    for node in cluster.nodes:
        recorder.record("invoke", f"reader-{node.short}", "read", None, node.name)
    for node in cluster.nodes:
        try:
            subs[node.name] = read_subscriptions(node)
        except HarnessError:
            failed.add(node.name)
    for node in cluster.nodes:
        try:
            retained[node.name] = read_retained(node)
        except HarnessError:
            failed.add(node.name)
    for node in cluster.nodes:
        process = f"reader-{node.short}"
        if node.name in failed:
            recorder.record("fail", process, "read", None, node.name)
            subs.pop(node.name, None)
            retained.pop(node.name, None)
        else:
            recorder.record("ok", process, "read",
                            {"retained": retained[node.name], "subscriptions": subs[node.name]}, node.name)
    return subs, retained


def dumps(cluster: Cluster, settle_s: float = 20.0) -> dict[str, list[Any]]:
    """Every node's metadata dump, taken again (at most `settle_s`) until they are identical."""
    end = time.monotonic() + settle_s
    latest: dict[str, list[Any]] = {}
    for _ in range(100):
        latest = {}
        for node in cluster.nodes:
            try:
                latest[node.name] = node.api("metadata/dump", timeout=30)
            except HarnessError:
                continue
        texts = {json.dumps(rows, sort_keys=True) for rows in latest.values()}
        if len(latest) == len(cluster.nodes) and len(texts) == 1:
            break
        if time.monotonic() >= end:
            break
        time.sleep(1.0)
    return latest
