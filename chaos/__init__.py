"""Chaos experiments: real vmqpy clusters partitioned, paused, killed and skewed while real MQTT clients work,
with every client operation recorded in a history that pure checkers judge (docs/chaos.md).

Pure parts: `history` (the operation records), `schedule` and `experiments` (what happens when, as data),
`replog` (reading replication logs), `checkers`, `verdict`, `summary`. The drivers: `node` (one node process),
`cluster` (a cluster of them: build, join, attach), `processes` and `ports` (every process started, stopped by
PID; free loopback ports), `iptables` (partitions in a chain of our own) and `proxy` (the fault proxy),
`nemesis`, `workloads`, `reads`, `runner`. The integration tests use the same harness
(tests/integration/cluster.py is a thin layer over `node`, `cluster` and `iptables`).
"""
