"""When the node stops reading a socket that trickles its CONNECT (a slow-loris), and for how long.

A real client sends its CONNECT in its first round trip: the node reads it in one or two reads a few
milliseconds after the accept. A slow-loris sends a byte now and then, and thousands of them writing at the same
moment make the node's one event loop read thousands of sockets in one burst, which delays every real client
behind it (docs/security.md, "Slow clients and floods"). So a socket whose CONNECT is still incomplete
`TRICKLE_AFTER` seconds after its accept is not read for a while: `ConnectPrelude` pauses its reading and resumes
it at `pause_until(...)`, between `PAUSE_MIN` and `PAUSE_MIN + PAUSE_SPREAD` seconds later, the point in that
span drawn at random for each pause. Meanwhile the kernel gathers the socket's bytes, and the next read takes
them in one go; the random points spread the reads of sockets that wrote together over the whole span.

The CONNECT deadline of each socket (`connect_deadline`) is `mqtt.connect_timeout` after its accept plus a random
part of `CLOSE_SPREAD` times that timeout: an attacker opens its sockets in one burst, and with one fixed deadline
the node closed them all in the same burst `mqtt.connect_timeout` later (the slowest probe round trips of
bench.flood came there), then accepted the attacker's reopened sockets in a burst again. Spread, the closes are
fewer per moment, and so are the reopens that follow them, wave after wave. No socket is closed before its
`mqtt.connect_timeout`. A paused socket is closed at its deadline like any other; a pause never ends after it.

Pure: time and the random draws (`jitter`, in [0, 1)) are arguments.
"""

from __future__ import annotations

TRICKLE_AFTER = 0.5  # seconds after the accept: a CONNECT still incomplete then is trickling
PAUSE_MIN = 1.0  # seconds a trickling socket is not read, at least
PAUSE_SPREAD = 2.0  # seconds: each pause lasts PAUSE_MIN plus a random part of this
CLOSE_SPREAD = 0.2  # of mqtt.connect_timeout: a socket's CONNECT deadline is its timeout plus a random part of this


def _check_jitter(jitter: float) -> None:
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must be in [0, 1), not {jitter!r}")


def connect_deadline(opened_at: float, timeout: float, jitter: float) -> float:
    """When a socket accepted at `opened_at` is closed if its CONNECT is still incomplete: `timeout` seconds
    later plus `jitter` (in [0, 1)) times `CLOSE_SPREAD` of `timeout`."""
    _check_jitter(jitter)
    return opened_at + timeout * (1.0 + CLOSE_SPREAD * jitter)


def pause_until(opened_at: float, now: float, jitter: float, deadline: float) -> float | None:
    """After a read at `now` that left the CONNECT of a socket accepted at `opened_at` incomplete: the time to
    read it again, or None to keep reading it. `jitter` (in [0, 1)) picks the point of the pause span;
    `deadline` is when the socket's CONNECT time is up (a pause never ends later)."""
    _check_jitter(jitter)
    if now - opened_at < TRICKLE_AFTER:
        return None
    return min(now + PAUSE_MIN + jitter * PAUSE_SPREAD, deadline)
