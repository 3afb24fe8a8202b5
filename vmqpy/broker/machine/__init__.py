"""SANS-I/O: the per-connection MQTT machine. Packets in, decisions out (what to send, when to close and with which
reason code), for both directions and both protocol levels; CONNECT negotiation, topic aliases. No asyncio, no
clock, no socket (tests/unit/broker/test_purity.py)."""
