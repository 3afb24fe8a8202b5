"""The connection driver's counters that take more than one increment: CONNACKs by return code and the
CONNECT-to-CONNACK latency histogram, kept in the broker's `metrics` Counter like every other broker counter.

Keys (what `NodeFacade.metrics()` shows under `broker.`; admin.prometheus names them for Prometheus):

- `mqtt_connack_<label>_sent`: one per CONNACK sent, `<label>` from `connack_label` (VerneMQ's return code
  names: success, unsupported_protocol_version, client_identifier_not_valid, server_unavailable,
  bad_username_or_password, not_authorized, other);
- `connect_latency_le_<us>` for each bound of `LATENCY_BOUNDS_US` and `connect_latency_le_inf`: how many
  connects took at most that many microseconds and more than the previous bound (not cumulative: the exporter
  adds them up); `connect_latency_count` and `connect_latency_sum_us` (whole microseconds).

Pure: the time is measured by the caller and passed in seconds.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from vmqpy.mqtt import reason_codes as rc

__all__ = ["CONNACK_LABELS", "LATENCY_BOUNDS_US", "connack_label", "latency_bucket_key", "observe_connect_latency"]

#: upper bounds of the latency buckets, microseconds (1 ms .. 5 s)
LATENCY_BOUNDS_US: Final = (1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
                            2_500_000, 5_000_000)

CONNACK_LABELS: Final = {
    rc.SUCCESS: "success",
    rc.UNSUPPORTED_PROTOCOL_VERSION: "unsupported_protocol_version",
    rc.CLIENT_IDENTIFIER_NOT_VALID: "client_identifier_not_valid",
    rc.SERVER_UNAVAILABLE: "server_unavailable",
    rc.SERVER_BUSY: "server_unavailable",
    rc.SERVER_SHUTTING_DOWN: "server_unavailable",
    rc.BAD_USER_NAME_OR_PASSWORD: "bad_username_or_password",
    rc.NOT_AUTHORIZED: "not_authorized",
}


def connack_label(reason_code: int) -> str:
    """The return-code label of a CONNACK sent with `reason_code` (5.0 numbering); "other" for the rest."""
    return CONNACK_LABELS.get(reason_code, "other")


def latency_bucket_key(seconds: float) -> str:
    """The key of the bucket that `seconds` falls in."""
    us = max(0, round(seconds * 1_000_000))
    for bound in LATENCY_BOUNDS_US:
        if us <= bound:
            return f"connect_latency_le_{bound}"
    return "connect_latency_le_inf"


def observe_connect_latency(metrics: Counter[str], seconds: float) -> None:
    """Count one connect that took `seconds` from its CONNECT to its CONNACK."""
    metrics[latency_bucket_key(seconds)] += 1
    metrics["connect_latency_count"] += 1
    metrics["connect_latency_sum_us"] += max(0, round(seconds * 1_000_000))
