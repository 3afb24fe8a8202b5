"""Workloads: real MQTT clients doing operations on random nodes while the nemesis works, each operation
recorded in the history. Each workload has `setup` (before the faults), `run` (worker threads until stopped)
and `finish` (after the heal and the quiet period: final reads, drains)."""

from chaos.workloads.base import Context, Endpoint, Workload

__all__ = ["Context", "Endpoint", "Workload"]
