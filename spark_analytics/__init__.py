"""PySpark jobs over the nodes' replication logs (docs/replication-log.md): how fast and how completely the
cluster converged, and, given a chaos history, whether anything was lost, duplicated or resurrected.

`python -m spark_analytics report --logs DIR` (or `spark-submit spark_analytics/job.py report ...`) writes
summary.json and report.html; docs/analytics.md explains every figure. The package reads files only: it never
imports vmqpy. Each figure is a `DataFrame -> DataFrame` transform in its own module: `events` (lines to
tables), `phases` (partitions and heals), `visibility` (PBS), `convergence`, `staleness`, `siblings`,
`exchanges` (anti-entropy), `safety` (history checks); `windows` (pure) says which partitions count and reads
the nemesis's fault windows; `report` runs them all, `html` draws the page, `progress` shows the stages.
"""
