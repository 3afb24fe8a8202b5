"""`FakeTransport`: an asyncio transport in memory, for the tests of what talks to a socket (the connection driver,
the listeners' preludes, the benchmark's clients)."""

from __future__ import annotations

import asyncio
from typing import Any

Peer = tuple[str, int]


class FakeTransport(asyncio.Transport):
    """Records what is written (`written`: all of it; `writes`: each write as it came), whether reading is paused
    (`paused`), closed (`closed`: by `close` or `abort`) or aborted (`aborted`), and the protocol it was handed on
    to (`protocol`); `peer` is its peername and `buffered` the size its write buffer reports. It cannot half-close
    (`can_write_eof` is not answered, as by a transport that does not say): a subclass that can says so."""

    def __init__(self, peer: Peer = ("127.0.0.1", 5555)) -> None:
        super().__init__()
        self.peer = peer
        self.written = bytearray()
        self.writes: list[bytes] = []
        self.paused = False
        self.closed = False
        self.aborted = False
        self.protocol: asyncio.BaseProtocol | None = None
        self.buffered = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data
        self.writes.append(bytes(data))

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True
        self.aborted = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None, "no protocol was set"
        return self.protocol
