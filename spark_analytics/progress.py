"""The report's progress line: which stage of the report runs, and for how long. One line redrawn in place on a
terminal (with a ticking clock), one plain line per stage otherwise (a log file, `make demo` piped)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

#: The stages of `report.analyze`, in order (what the progress line counts).
STAGES = ("reading logs", "partitions", "visibility", "convergence", "staleness", "siblings", "anti-entropy",
          "safety", "writing")
_WIDTH = 79


class Progress:
    """`stage(name)` moves the line on; `close()` ends it (also as a context manager)."""

    def __init__(self, out: TextIO = sys.stderr, stages: tuple[str, ...] = STAGES) -> None:
        self._out = out
        self._tty = out.isatty()
        self._stages = stages
        self._stage = "starting Spark"
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._tty:
            self._thread = threading.Thread(target=self._tick, name="report-progress", daemon=True)
            self._thread.start()

    def text(self) -> str:
        """The line as it reads now: `[  12.3s] report 3/9: visibility`."""
        where = f"{self._stages.index(self._stage) + 1}/{len(self._stages)}: " if self._stage in self._stages else ""
        return f"[{time.monotonic() - self._t0:6.1f}s] report {where}{self._stage}"

    def stage(self, name: str) -> None:
        with self._lock:
            self._stage = name
            self._draw()

    def _draw(self) -> None:
        if self._tty:
            self._out.write("\r" + self.text()[:_WIDTH].ljust(_WIDTH))
        else:
            self._out.write(self.text() + "\n")
        self._out.flush()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                self._draw()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
            self._out.write("\r" + " " * _WIDTH + "\r")  # the result lines replace the progress line
            self._out.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
