"""Chaos experiments: real vmqpy clusters partitioned, paused, killed and skewed while real MQTT clients work,
with every client operation recorded in a history that pure checkers judge (docs/chaos.md).

Pure parts: `history` (the operation records), `schedule` and `experiments` (what happens when, as data),
`replog` (reading replication logs), `checkers`. The drivers: `cluster` (node processes), `network` (iptables
and the fault proxy), `nemesis`, `workloads`, `runner`.
"""
