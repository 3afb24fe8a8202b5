"""The doors (asyncio): the listeners of each kind (tcp, ssl, ws, wss) and their life as the operator sees it,
TLS contexts, WebSocket, the PROXY protocol and the preludes that read it, the limits per listener and per
address. A listener accepts a socket and hands it to a connection of `vmqpy.broker.driver`."""
