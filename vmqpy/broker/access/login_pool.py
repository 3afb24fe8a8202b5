"""The login pool: password checks (PBKDF2, milliseconds each) run in a few worker threads, not on the event loop.

hashlib's `pbkdf2_hmac` releases the GIL while it hashes, so a thread is enough to keep the loop free (measured:
the loop's other clients keep their sub-millisecond turns while a worker hashes; a process pool is not needed).
`auth.hash_workers` threads hash; at most `auth.hash_workers + auth.hash_queue` checks are taken at once
(vmqpy.broker.access.login_throttle.Admission): one more is refused at once (`submit` answers False) and its CONNECT is
answered Server busy (5.0 0x89, 3.1.1 return code 3), rather than queued without bound. The verdict is handed back
on the event loop (`loop.call_soon_threadsafe`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from vmqpy.broker.access.login_throttle import Admission

__all__ = ["Check", "LoginPool"]


class Check(Protocol):
    """What the pool runs: vmqpy.broker.access.auth.PasswordCheck."""

    def run(self) -> bool:
        """Whether the login is accepted (slow: called in a worker thread)."""
        ...


class LoginPool:
    """Worker threads for password checks, with a bounded number of checks taken at once."""

    def __init__(self, workers: int, queue: int) -> None:
        if workers < 1 or queue < 0:
            raise ValueError("workers >= 1 and queue >= 0 are required")
        self.admission = Admission(workers + queue)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vmqpy-login")
        self._closed = False

    @property
    def pending(self) -> int:
        """Checks taken and not yet answered."""
        return self.admission.pending

    def submit(self, check: Check, loop: asyncio.AbstractEventLoop, done: Callable[[bool], None]) -> bool:
        """Run `check` in a worker and call `done(accepted)` on `loop` afterwards; False (and `done` is never
        called) when the pool is full or closed."""
        if self._closed or not self.admission.enter():
            return False

        def finished(future: Future[bool]) -> None:  # in the worker thread
            accepted = not future.cancelled() and future.exception() is None and future.result()
            try:
                loop.call_soon_threadsafe(self._answer, done, accepted)
            except RuntimeError:  # the loop is closed: nobody waits for the answer
                pass

        try:
            future = self._executor.submit(check.run)
        except RuntimeError:  # shut down meanwhile
            self.admission.leave()
            return False
        future.add_done_callback(finished)
        return True

    def _answer(self, done: Callable[[bool], None], accepted: bool) -> None:
        self.admission.leave()
        done(accepted)

    def close(self) -> None:
        """Take no more checks; the queued ones are dropped (their connections are closing with the node)."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
