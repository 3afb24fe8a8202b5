"""`vmqpy start --workers N`: one node per core on one host, joined as a local cluster, behind one MQTT port
(docs/scaling.md). `plan` says what each worker is (pure); `supervisor` starts them and keeps them running."""
