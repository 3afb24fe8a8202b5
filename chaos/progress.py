"""The progress display: phase, seconds, operations done and the nemesis state. One line redrawn in place on a
terminal, a plain line every few seconds otherwise."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(self, ops: Callable[[], int], nemesis: Callable[[], str], out: TextIO = sys.stderr) -> None:
        self._ops = ops
        self._nemesis = nemesis
        self._out = out
        self._tty = out.isatty()
        self.phase = "starting"
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.line(force_newline=True)

    def line(self, force_newline: bool = False) -> None:
        text = (f"[{time.monotonic() - self._t0:6.1f}s] {self.phase:<10} ops {self._ops():6d}  "
                f"nemesis: {self._nemesis()}")
        if self._tty and not force_newline:
            self._out.write("\r" + text[:150].ljust(150))
        else:
            self._out.write(("\n" if self._tty else "") + text + "\n")
        self._out.flush()

    def _run(self) -> None:
        interval = 0.5 if self._tty else 3.0
        while not self._stop.wait(interval):
            self.line()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        if self._tty:
            self._out.write("\n")
