"""The connection driver (asyncio): one `MQTTConnection` per client socket over the machine of
`vmqpy.broker.machine`, its CONNECT half, its read gate (pause/resume), its `Writer` (output and flushing), its
ordered acknowledgements, its lingering close, the keep-alive wheel, the long SUBSCRIBE in slices, the node's
live connections. Reads the clock once per loop callback and passes `now` down."""
