"""vmqpy.broker.listeners.websocket.WebSocketTransport with a fake WebSocket: what the connection writes leaves as
binary
frames in order, writing pauses the connection over the high-water mark and resumes it once sent, close sends
what is queued first, paused reading takes no frame, and a text frame is a protocol error."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import WSMessage, WSMsgType

from vmqpy.broker.listeners.websocket import WebSocketTransport


class FakeWebSocket:
    def __init__(self, incoming: list[WSMessage]) -> None:
        self.sent: list[bytes] = []
        self.closed = False
        self.incoming: asyncio.Queue[WSMessage] = asyncio.Queue()
        for message in incoming:
            self.incoming.put_nowait(message)
        self.gate = asyncio.Event()  # send_bytes waits on it: the peer reads slowly
        self.gate.set()

    async def send_bytes(self, data: bytes) -> None:
        await self.gate.wait()
        self.sent.append(data)

    async def close(self) -> None:
        self.closed = True

    async def receive(self) -> WSMessage:
        return await self.incoming.get()

    def exception(self) -> None:
        return None


class FakeRequest:
    transport = None


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    def data_received(self, data: bytes) -> None:
        self.events.append(data)


def binary(data: bytes) -> WSMessage:
    return WSMessage(WSMsgType.BINARY, data, None)


def make(incoming: list[WSMessage]) -> tuple[WebSocketTransport, FakeWebSocket, Recorder]:
    ws = FakeWebSocket(incoming)
    transport = WebSocketTransport(ws, FakeRequest())  # type: ignore[arg-type]
    protocol = Recorder()
    transport.set_protocol(protocol)
    transport.set_write_buffer_limits(high=100)
    return transport, ws, protocol


def test_writes_leave_in_order_with_backpressure_and_close_sends_them_first() -> None:
    async def scenario() -> tuple[list[bytes], list[Any], bool]:
        transport, ws, protocol = make([])
        ws.gate.clear()
        sender = asyncio.get_running_loop().create_task(transport.send_frames())
        transport.write(b"a" * 60)
        transport.write(b"b" * 60)  # 120 bytes waiting > 100: the connection is told to pause
        assert protocol.events == ["pause"] and transport.get_write_buffer_size() == 120
        await asyncio.sleep(0)
        transport.write(b"c")
        ws.gate.set()
        for _ in range(50):
            await asyncio.sleep(0)
        transport.write(b"d")
        transport.close()
        transport.write(b"after close")  # dropped: the transport is closing
        await asyncio.wait_for(sender, 5)
        return ws.sent, protocol.events, ws.closed

    sent, events, closed = asyncio.run(scenario())
    assert b"".join(sent) == b"a" * 60 + b"b" * 60 + b"c" + b"d"
    assert events == ["pause", "resume"] and closed


def test_binary_frames_are_data_paused_reading_takes_none_and_text_is_an_error() -> None:
    async def scenario() -> tuple[list[Any], str | None]:
        transport, _ws, protocol = make([binary(b"\x10"), binary(b"\x0c\x00"), WSMessage(WSMsgType.TEXT, "x", None)])
        transport.pause_reading()
        receiving = asyncio.get_running_loop().create_task(transport.receive_frames())
        for _ in range(20):
            await asyncio.sleep(0)
        assert protocol.events == [] and not transport.is_reading()
        transport.resume_reading()
        return protocol.events, await asyncio.wait_for(receiving, 5)

    events, error = asyncio.run(scenario())
    assert events == [b"\x10", b"\x0c\x00"]
    assert error is not None and "text frame" in error


def test_a_close_frame_ends_reading_without_error() -> None:
    async def scenario() -> str | None:
        transport, _ws, _protocol = make([WSMessage(WSMsgType.CLOSE, 1000, None)])
        return await asyncio.wait_for(transport.receive_frames(), 5)

    assert asyncio.run(scenario()) is None
