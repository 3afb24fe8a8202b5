"""The node's counters that take more than one increment: CONNACKs by return code and the latency histograms,
kept in a `Counter` like every other counter of the node (the broker's `metrics`, registration's histograms).

Keys (what `NodeFacade.metrics()` shows under `broker.` or `registration.`; admin.prometheus names them for
Prometheus):

- `mqtt_<packet>_sent` for the packets of `SENT_COUNTERS`, counted by the connection driver as it writes them;
- `mqtt_connack_<label>_sent`: one per CONNACK sent, `<label>` from `connack_label` (VerneMQ's return code
  names: success, unsupported_protocol_version, client_identifier_not_valid, server_unavailable,
  bad_username_or_password, not_authorized, other);
- a histogram `H` (one of `HISTOGRAMS`, e.g. `connect_latency`): `H_le_<us>` for each of its bounds and `H_le_inf`:
  how many observations were at most that many microseconds and more than the previous bound (not cumulative:
  the exporter adds them up, and their total is the count), and `H_sum_us` (whole microseconds).

The histograms (bounds in one place, `BOUNDS_US`; admin.prometheus keeps the same table, a unit test checks):

- `connect_latency` (broker): from a CONNECT read to its CONNACK written (accepted connects);
- `delivery_latency` (broker): from a PUBLISH read on the publisher's connection to the PUBLISH written to a
  subscriber's connection on the same node; for a message forwarded by another node, from its arrival here;
  resends (DUP) and messages restored from disk or handed over by another node are not observed;
- `handover_duration` (registration): from asking another node to hand a session over (a takeover of a client
  connected there) to the session being live here (its CONNACK written).

Pure: the caller measures the time and passes it in; `observe` costs one `bisect` and two increments (the
count is not kept apart: it is the buckets' total).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import Final

from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import Disconnect, Pingresp, Puback, Pubcomp, Pubrec, Pubrel, Suback, Unsuback

__all__ = [
    "BOUNDS_US",
    "CONNACK_LABELS",
    "CONNECT_LATENCY",
    "DELIVERY_LATENCY",
    "HANDOVER_DURATION",
    "HISTOGRAMS",
    "LATENCY_BOUNDS_US",
    "SENT_COUNTERS",
    "Histogram",
    "NodeCounters",
    "connack_label",
    "latency_bucket_key",
    "observe_connect_latency",
]


class NodeCounters(Counter[str]):
    """The node's counters (the broker's `metrics`): a Counter whose `counters[key] += 1` costs what a dict's does.

    collections.Counter defines `__delitem__` in Python, which routes every item assignment through a Python-level
    slot (about 2.5 times the cost of a dict's, measured: 287 against 120 ns per increment on the test machine);
    taking dict's own `__delitem__` back restores the C slot. The one difference: deleting a missing key raises
    KeyError (nothing deletes the node's counters)."""

    __delitem__ = dict.__delitem__  # type: ignore[assignment]  # (Counter's accepts any key and ignores a missing one)


#: every histogram's upper bucket bounds, microseconds
BOUNDS_US: Final[dict[str, tuple[int, ...]]] = {
    "connect_latency": (1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
                        2_500_000, 5_000_000),
    "delivery_latency": (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
                         1_000_000, 2_500_000, 5_000_000),
    "handover_duration": (1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
                          2_500_000, 5_000_000, 10_000_000),
}
#: the CONNECT-to-CONNACK bounds (the name earlier versions exported)
LATENCY_BOUNDS_US: Final = BOUNDS_US["connect_latency"]


class Histogram:
    """One histogram kept as counter keys `<name>_le_<us>`, `<name>_le_inf` and `<name>_sum_us`."""

    __slots__ = ("bounds", "keys", "name", "sum_key")

    def __init__(self, name: str, bounds: tuple[int, ...]) -> None:
        if not bounds or list(bounds) != sorted(set(bounds)) or bounds[0] <= 0:
            raise ValueError(f"histogram {name}: bounds must be positive and increasing, got {bounds!r}")
        self.name = name
        self.bounds = bounds
        self.keys = (*(f"{name}_le_{bound}" for bound in bounds), f"{name}_le_inf")  # per bucket, then +Inf
        self.sum_key = f"{name}_sum_us"

    def bucket_key(self, us: int) -> str:
        """The key of the bucket that `us` microseconds fall in (a negative time counts as 0)."""
        return self.keys[bisect_left(self.bounds, us)]

    def observe(self, counter: Counter[str], us: int) -> None:
        """Count one observation of `us` microseconds (a clock that stepped back counts as 0)."""
        if us < 0:
            us = 0
        counter[self.keys[bisect_left(self.bounds, us)]] += 1
        counter[self.sum_key] += us

    def observe_ns(self, counter: Counter[str], ns: int) -> None:
        """Count one observation of `ns` nanoseconds (rounded down to whole microseconds). The delivery latency,
        counted for every PUBLISH written to a subscriber, is counted by the compiled driver itself
        (vmqpy.broker.driver.connection, `write_publish`: this function's three lines written out there)."""
        us = ns // 1_000 if ns > 0 else 0
        counter[self.keys[bisect_left(self.bounds, us)]] += 1
        counter[self.sum_key] += us


CONNECT_LATENCY: Final = Histogram("connect_latency", BOUNDS_US["connect_latency"])
DELIVERY_LATENCY: Final = Histogram("delivery_latency", BOUNDS_US["delivery_latency"])
HANDOVER_DURATION: Final = Histogram("handover_duration", BOUNDS_US["handover_duration"])
HISTOGRAMS: Final = (CONNECT_LATENCY, DELIVERY_LATENCY, HANDOVER_DURATION)

#: the counter of each kind of packet the node writes (but PUBLISH and CONNACK, counted on their own)
SENT_COUNTERS: Final[dict[type, str]] = {
    Puback: "mqtt_puback_sent", Pubrec: "mqtt_pubrec_sent", Pubrel: "mqtt_pubrel_sent",
    Pubcomp: "mqtt_pubcomp_sent", Suback: "mqtt_suback_sent", Unsuback: "mqtt_unsuback_sent",
    Pingresp: "mqtt_pingresp_sent", Disconnect: "mqtt_disconnect_sent",
}

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


def _us(seconds: float) -> int:
    return max(0, round(seconds * 1_000_000))


def latency_bucket_key(seconds: float) -> str:
    """The key of the CONNECT-to-CONNACK bucket that `seconds` falls in."""
    return CONNECT_LATENCY.bucket_key(_us(seconds))


def observe_connect_latency(metrics: Counter[str], seconds: float) -> None:
    """Count one connect that took `seconds` from its CONNECT to its CONNACK."""
    CONNECT_LATENCY.observe(metrics, _us(seconds))
