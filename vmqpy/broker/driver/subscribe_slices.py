"""A SUBSCRIBE of many filters, handled a slice a loop turn (a function of the connection driver,
vmqpy.broker.driver.connection, like vmqpy.broker.driver.connect_flow).

Each filter costs the node a metadata write and a routing change (about 0.05 to 0.1 ms): one packet may carry
65,535 of them, seconds of work that, done in one turn, would stall every client and every cluster link of the
node. A SUBSCRIBE of more than `SLICED_ABOVE` filters is judged and added a slice a loop turn, in order, by the
connection machine and the broker as any SUBSCRIBE is (the quota of `max_subscriptions_per_client` sees the
filters of the slices before); each slice is sized to take about the budget of the node's bulk lane, which
runs it (vmqpy.broker.core.turn_budget: 0.2 ms, at most `SLICE` filters); meanwhile nothing more is read from that
client. One SUBACK with every filter's reason code, in the packet's order, leaves after the last slice; the
retained messages follow it, a slice of filters a turn too.

Decoding the filters costs too (about 2.4 us each in the interpreter; a 1 MiB SUBSCRIBE holds up to 262,141
one-character filters, 0.5-0.75 s): a SUBSCRIBE of more than `LONG_SUBSCRIBE` bytes of filters comes from the
decoder undecoded (vmqpy.mqtt.decoder.LongSubscribe) and its filters are decoded a slice a turn in the lane first
(`decode`), nothing of it applied until all of it is decoded, so that a malformed filter anywhere ends the
connection with nothing of the packet taking effect, as a whole decode does.

An UNSUBSCRIBE of more than `SLICED_ABOVE` filters is undone the same way (`unsubscribe_sliced`,
`start_unsubscribe`): the connection machine allows it once (the netsplit policy), the broker removes a slice of
filters a loop turn, in order, nothing more is read from that client meanwhile, and one UNSUBACK with every
filter's reason code leaves after the last slice [MQTT-3.10.4-5]. Removing a subscription costs what adding one
does (its metadata delete and routing change): 40,000 in one turn stalled the node about 3 s
(tests/integration/test_subscribe_slices.py). Slices of a fixed 256 filters took 14 to 30 ms each on a loaded
machine, and another client's round trip waited about 60 ms behind them (test_hostile_clients.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from time import time as wall_clock  # a name of its own: compiled, `time.time()` escapes the simulation's clock
from typing import TYPE_CHECKING, Any

from vmqpy.broker.core.turn_budget import SlicePace
from vmqpy.broker.machine.decisions import Reply, SubscribeTo, suback_codes
from vmqpy.broker.operations.trace import RECEIVED
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.decoder import LongSubscribe
from vmqpy.mqtt.errors import RemoteProtocolError
from vmqpy.mqtt.packets import Suback, Subscribe, Unsuback, Unsubscribe
from vmqpy.sessions.parts import SubEntry

if TYPE_CHECKING:
    from vmqpy.broker.driver.connection import MQTTConnection

__all__ = ["LONG_SUBSCRIBE", "SLICE", "SLICED_ABOVE", "decode", "sliced", "start", "start_unsubscribe",
           "unsubscribe_sliced"]

SLICE = 256  # filters judged and added per loop turn at the most; fewer when they take longer than the turn's budget
SLICED_ABOVE = 16  # a packet of more filters is handled in slices (vmqpy.broker.core.turn_budget.SlicePace)
LONG_SUBSCRIBE = 2048  # bytes of filters above which a SUBSCRIBE is decoded in slices too (about 500 filters at most)
DECODE_SLICE = 4096  # filters decoded per loop turn at the most (about 2.4 us each: fewer, sized to the budget)
DECODE_FIRST = 64  # filters of the first slice, before the time per filter is known


@dataclass(slots=True)
class _Progress:
    packet: Subscribe
    position: int = 0
    codes: list[int] = field(default_factory=list)
    added: list[tuple[SubEntry, bool]] = field(default_factory=list)
    pace: SlicePace = field(default_factory=lambda: SlicePace(SLICE))
    confirm: Any = None  # Broker.route_confirmation: what the SUBACK waits for besides the disk

    def __init__(self, packet: Subscribe, position: int = 0, codes: list[int] | None = None,
                 added: list[tuple[SubEntry, bool]] | None = None, pace: SlicePace | None = None,
                 confirm: Any = None) -> None:
        self.packet = packet
        self.position = position
        self.codes = [] if codes is None else codes
        self.added = [] if added is None else added
        self.pace = SlicePace(SLICE) if pace is None else pace
        self.confirm = confirm


def sliced(packet: Subscribe) -> bool:
    """Whether `packet` is handled in slices (more than `SLICED_ABOVE` filters)."""
    return len(packet.subscriptions) > SLICED_ABOVE


def start(conn: MQTTConnection, packet: Subscribe) -> None:
    """Handle `packet` (of a connected client) in slices; nothing more is read from `conn` until its SUBACK."""
    _hold(conn)
    _step(conn, _Progress(packet, confirm=conn.broker.route_confirmation()))


def decode(conn: MQTTConnection, long: LongSubscribe) -> None:
    """A SUBSCRIBE too long to decode in one turn (vmqpy.mqtt.decoder.LongSubscribe, above `LONG_SUBSCRIBE` bytes of
    filters): its filters are decoded a slice a turn in the bulk lane, nothing more read from `conn` meanwhile, and
    only then is it handled as any SUBSCRIBE (a malformed filter anywhere ends the connection before any filter of
    the packet takes effect)."""
    _hold(conn)
    _decode_step(conn, long, SlicePace(DECODE_SLICE, first=DECODE_FIRST))


def _decode_step(conn: MQTTConnection, long: LongSubscribe, pace: SlicePace) -> None:
    if conn.closing:
        _release(conn)
        return
    try:
        pace.done(long.decode(pace.start()))
        if not long.done:
            conn.broker.lane.add(partial(_decode_step, conn, long, pace), conn.loop.call_soon)
            return
        packet = long.packet()
    except Exception as exc:  # a defect here must not leave the client held for ever either
        _failed(conn, exc)
        return
    if conn.machine.connected_now and sliced(packet):
        if conn.traces:
            conn.trace(RECEIVED, packet, wall_clock())
        _step(conn, _Progress(packet, confirm=conn.broker.route_confirmation()))  # reading held until its SUBACK
        return
    _release(conn)
    conn.process(packet)  # as any SUBSCRIBE (traced there), then what the client sent meanwhile


def _step(conn: MQTTConnection, progress: _Progress) -> None:
    """One slice (a loop callback: a protocol error ends the connection here, as `MQTTConnection.process` does)."""
    try:
        _slice(conn, progress)
    except Exception as exc:
        _failed(conn, exc)


def _failed(conn: MQTTConnection, exc: Exception) -> None:
    """A slice's error ends the connection, as one in `MQTTConnection.process` does: a protocol error with its
    reason code, anything else as an internal error (called in the `except` block, which the log line shows)."""
    _release(conn)
    if isinstance(exc, RemoteProtocolError):
        conn.log.warning("protocol error", reason=str(exc), reason_code=hex(exc.reason_code))
        conn.protocol_error(exc.reason_code)
    else:
        conn.log.exception("internal error on connection")
        conn.protocol_error(rc.UNSPECIFIED_ERROR)


def _slice(conn: MQTTConnection, progress: _Progress) -> None:
    session = conn.session
    if conn.closing or session is None:
        _release(conn)
        return
    packet = progress.packet
    begin = progress.position
    pace = progress.pace
    chunk = Subscribe(packet.packet_id, packet.subscriptions[begin:begin + pace.start()], packet.properties)
    progress.position = begin + len(chunk.subscriptions)
    ids = packet.properties.subscription_identifiers
    for decision in conn.machine.receive(chunk, wall_clock()):
        if type(decision) is Reply and type(decision.packet) is Suback:  # every filter of the slice refused
            progress.codes += decision.packet.reason_codes
        elif type(decision) is SubscribeTo:
            refused = decision.refused
            wanted = [sub for index, sub in enumerate(chunk.subscriptions) if index not in refused]
            codes, added = conn.broker.subscribe(session, wanted, ids[0] if ids else None, progress.confirm)
            progress.codes += suback_codes(len(chunk.subscriptions), refused, codes)
            progress.added += added
        else:  # not expected of a SUBSCRIBE: carried out as usual
            conn.carry_out(decision)
    pace.done(len(chunk.subscriptions))
    if progress.position < len(packet.subscriptions):
        conn.broker.lane.add(partial(_step, conn, progress), conn.loop.call_soon)
        return
    conn.broker.metrics["mqtt_subscribe_received"] += 1
    reply = Suback(packet.packet_id, progress.codes)
    added = progress.added

    def answer() -> None:
        conn.write_packet(reply)
        _deliver_retained(conn, added, 0, SlicePace(SLICE))

    conn.acks.after(session.persistent, answer, conn.broker.routes_applied(progress.confirm))
    _release(conn)
    conn.process()  # what the client sent meanwhile


def unsubscribe_sliced(packet: Unsubscribe) -> bool:
    """Whether `packet` is undone in slices (more than `SLICED_ABOVE` filters)."""
    return len(packet.topic_filters) > SLICED_ABOVE


def start_unsubscribe(conn: MQTTConnection, packet: Unsubscribe) -> None:
    """Undo `packet` (allowed by the connection machine) in slices; nothing more is read from `conn` until its
    UNSUBACK."""
    _hold(conn)
    _unsubscribe_step(conn, packet, 0, [], SlicePace(SLICE), conn.broker.route_confirmation())


def _unsubscribe_step(conn: MQTTConnection, packet: Unsubscribe, begin: int, codes: list[int],
                      pace: SlicePace, confirm: Any) -> None:
    """One slice (a loop callback: an error ends the connection here, as `MQTTConnection.process` does)."""
    session = conn.session
    if conn.closing or session is None:
        _release(conn)
        return
    end = begin + pace.start()
    try:
        codes += conn.broker.unsubscribe(session, packet.topic_filters[begin:end], confirm)
    except Exception as exc:
        _failed(conn, exc)
        return
    pace.done(len(packet.topic_filters[begin:end]))
    if end < len(packet.topic_filters):
        conn.broker.lane.add(partial(_unsubscribe_step, conn, packet, end, codes, pace, confirm),
                             conn.loop.call_soon)
        return
    reply = Unsuback(packet.packet_id, codes)
    conn.acks.after(session.persistent, lambda: conn.write_packet(reply), conn.broker.routes_applied(confirm))
    _release(conn)
    conn.process()  # what the client sent meanwhile


def _deliver_retained(conn: MQTTConnection, added: list[tuple[SubEntry, bool]], begin: int,
                      pace: SlicePace) -> None:
    session = conn.session
    if conn.closing or session is None:
        return
    end = begin + pace.start()
    conn.broker.deliver_retained(session, added[begin:end], wall_clock())
    pace.done(len(added[begin:end]))
    if end < len(added):
        conn.broker.lane.add(partial(_deliver_retained, conn, added, end, pace), conn.loop.call_soon)


def _hold(conn: MQTTConnection) -> None:
    conn.subscribing = True
    conn.gate.blocked_on += 1  # reading paused, as for a congested subscriber
    conn.gate.update()


def _release(conn: MQTTConnection) -> None:
    if conn.subscribing:
        conn.subscribing = False
        conn.gate.blocked_on -= 1
        conn.gate.update()
