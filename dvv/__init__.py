"""Dotted version vectors and server-wide clocks: a pure library (no I/O, no clocks, no asyncio)."""
