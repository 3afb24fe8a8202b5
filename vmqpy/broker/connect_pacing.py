"""When the node stops reading a socket that trickles its CONNECT (a slow-loris), and for how long.

A real client sends its CONNECT in its first round trip: the node reads it in one or two reads a few
milliseconds after the accept. A slow-loris sends a byte now and then, and thousands of them writing at the same
moment make the node's one event loop read thousands of sockets in one burst, which delays every real client
behind it (docs/security.md, "Slow clients and floods"). So a socket whose CONNECT is still incomplete
`TRICKLE_AFTER` seconds after its accept is not read for a while: `ConnectPrelude` pauses its reading and resumes
it at `pause_until(...)`, between `PAUSE_MIN` and `PAUSE_MIN + PAUSE_SPREAD` seconds later, the point in that
span drawn at random for each pause. Meanwhile the kernel gathers the socket's bytes, and the next read takes
them in one go; the random points spread the reads of sockets that wrote together over the whole span.

Pure: time and the random draw (`jitter`, in [0, 1)) are arguments. The CONNECT deadline is not moved: a paused
socket is closed at `mqtt.connect_timeout` like any other, and a pause never ends after that deadline.
"""

from __future__ import annotations

TRICKLE_AFTER = 0.5  # seconds after the accept: a CONNECT still incomplete then is trickling
PAUSE_MIN = 1.0  # seconds a trickling socket is not read, at least
PAUSE_SPREAD = 2.0  # seconds: each pause lasts PAUSE_MIN plus a random part of this


def pause_until(opened_at: float, now: float, jitter: float, deadline: float) -> float | None:
    """After a read at `now` that left the CONNECT of a socket accepted at `opened_at` incomplete: the time to
    read it again, or None to keep reading it. `jitter` (in [0, 1)) picks the point of the pause span;
    `deadline` is when the socket's CONNECT time is up (a pause never ends later)."""
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must be in [0, 1), not {jitter!r}")
    if now - opened_at < TRICKLE_AFTER:
        return None
    return min(now + PAUSE_MIN + jitter * PAUSE_SPREAD, deadline)
