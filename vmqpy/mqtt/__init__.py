"""Sans-I/O MQTT 3.1.1 and 5.0: packets, codec, topics and errors. No sockets, no asyncio, no clocks."""
