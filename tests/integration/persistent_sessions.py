"""How a test client asks for a persistent session on MQTT 3.1.1 and 5.0."""

from __future__ import annotations

from typing import Any


def persistent(version: int, expiry: int = 300) -> dict[str, Any]:
    """connect() keyword arguments for a persistent session: no clean start, and on 5.0 a Session Expiry Interval
    of `expiry` seconds."""
    return {"clean": False, "props": {"session_expiry_interval": expiry} if version == 5 else None}
