"""The broker on one node, in six rooms; each imports only the rooms below it (docs/architecture.md, held by
tests/unit/test_import_rules.py):

listeners   the doors: TCP, TLS, WebSocket listeners, PROXY preludes, limits per listener and per address
driver      asyncio per connection: the connection, its CONNECT half, read gate, writer, keep-alive, linger
machine     SANS-I/O: the per-connection MQTT machine, its inbound and outbound rules and decisions
core        SANS-I/O: sessions, routing, retained messages, wills, forwards, sessions moving between nodes
access      who may do what: ACL, passwords, the failed-login table, the ACL's word on each delivery
operations  what the operator reads: the $SYS tree, the client tracer
"""
