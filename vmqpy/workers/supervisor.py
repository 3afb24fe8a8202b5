"""The process of `vmqpy start --workers N`: it starts the N workers of `plan` (each `vmqpy start` with the same
configuration and the worker's `--set` overrides), hands them the signals it gets, and starts again a worker that
ended on its own.

- SIGTERM, SIGINT: every worker is sent SIGTERM (by its PID) and waited for, at most STOP_TIMEOUT seconds each,
  then killed; the supervisor then exits 0 (1 when a worker had to be killed).
- SIGHUP: passed on to every worker (each reloads its password and ACL files).
- A worker that ends while the supervisor runs is started again after RESTART_DELAY, with its data directory: it
  rejoins the local cluster as the node it was. A worker that ends RESTART_LIMIT times within RESTART_WINDOW
  seconds, or refuses its configuration (exit status 2), is not started again: the supervisor stops the others
  and exits with that status, as a node that cannot start would.

Each line it writes to stderr starts with `vmqpy workers:`; the workers log as nodes do, each line naming its
node. The supervisor's own loop waits for signals (`sigtimedwait`, SIGCHLD included), so an idle host costs it
nothing.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vmqpy.workers.plan import Worker

__all__ = ["RESTART_DELAY", "RESTART_LIMIT", "RESTART_WINDOW", "STARTED", "STOP_TIMEOUT", "Supervisor",
           "started_pids"]

STOP_TIMEOUT = 30.0  # seconds a worker has to stop after SIGTERM before it is killed
RESTART_DELAY = 1.0  # seconds before a worker that ended is started again
RESTART_LIMIT = 5  # ends within RESTART_WINDOW after which a worker is given up on
RESTART_WINDOW = 60.0
CONFIG_REFUSED = 2  # the exit status of `vmqpy start` that refuses its configuration
WAKE_EVERY = 1.0  # seconds between two looks at the workers when no signal comes
HANDLED = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


#: the line `start` writes for each worker it starts: `started_pids` reads the PIDs back from the output
STARTED = re.compile(r"worker (\d+) \((\S+)\) started, pid (\d+)")


def started_pids(output: str) -> dict[int, int]:
    """The latest PID of each worker (by index) in a supervisor's output."""
    return {int(m[1]): int(m[3]) for m in STARTED.finditer(output)}


def _unblock() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)


def say(line: str) -> None:
    print(f"vmqpy workers: {line}", file=sys.stderr, flush=True)


@dataclass
class Running:
    worker: Worker
    process: subprocess.Popen[bytes] | None = None
    ends: deque[float] = field(default_factory=deque)  # when it ended on its own, within RESTART_WINDOW
    restart_at: float | None = None


class Supervisor:
    def __init__(self, workers: Sequence[Worker], config_file: Path | None, overrides: Sequence[str],
                 python: str = sys.executable) -> None:
        self.running = [Running(worker) for worker in workers]
        self.config_file = config_file
        self.overrides = list(overrides)
        self.python = python
        self.status = 0

    def command(self, worker: Worker) -> list[str]:
        """`vmqpy start` of `worker`: the configuration given to the supervisor, then the worker's keys (which win:
        the last `--set` of a key is the one in force)."""
        command = [self.python, "-m", "vmqpy", "start"]
        if self.config_file is not None:
            command += ["--config", str(self.config_file)]
        for override in [*self.overrides, *worker.overrides]:
            command += ["--set", override]
        return command

    def start(self, running: Running) -> None:
        worker = running.worker
        # A child inherits the mask of blocked signals across exec: a worker must get its SIGTERM.
        running.process = subprocess.Popen(self.command(worker), stdin=subprocess.DEVNULL, preexec_fn=_unblock)
        running.restart_at = None
        say(f"worker {worker.index} ({worker.nodename}) started, pid {running.process.pid}, "
            f"data directory {worker.data_dir}")

    def run(self) -> int:
        """Start every worker and supervise them until a stop signal (or a worker given up on); the exit status."""
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        try:
            for running in self.running:
                self.start(running)
            while True:
                received = signal.sigtimedwait(HANDLED, WAKE_EVERY)
                number = None if received is None else received.si_signo
                if number in (signal.SIGTERM, signal.SIGINT):
                    say(f"{signal.Signals(number).name}: stopping the workers")
                    break
                if number == signal.SIGHUP:
                    self.signal_all(signal.SIGHUP)
                if not self.look():
                    break
        finally:
            self.stop_all()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)
        return self.status

    def look(self) -> bool:
        """Notice the workers that ended and start them again when their time came; False: give up (`status`)."""
        now = time.monotonic()
        for running in self.running:
            process = running.process
            if process is not None and process.poll() is not None:
                code = process.returncode
                running.process = None
                worker = running.worker
                running.ends.append(now)
                while running.ends and now - running.ends[0] > RESTART_WINDOW:
                    running.ends.popleft()
                if code == CONFIG_REFUSED or len(running.ends) >= RESTART_LIMIT:
                    why = ("it refused its configuration" if code == CONFIG_REFUSED
                           else f"it ended {len(running.ends)} times within {RESTART_WINDOW:.0f} s")
                    say(f"worker {worker.index} ({worker.nodename}) exited with status {code}: {why}; "
                        f"stopping the others")
                    self.status = code or 1
                    return False
                say(f"worker {worker.index} ({worker.nodename}) exited with status {code}; starting it again "
                    f"in {RESTART_DELAY:.0f} s")
                running.restart_at = now + RESTART_DELAY
            if running.process is None and running.restart_at is not None and now >= running.restart_at:
                self.start(running)
        return True

    def signal_all(self, number: signal.Signals) -> None:
        for running in self.running:
            if running.process is not None and running.process.poll() is None:
                running.process.send_signal(number)

    def stop_all(self) -> None:
        """SIGTERM to every worker by its PID, then wait for each (killed after STOP_TIMEOUT)."""
        self.signal_all(signal.SIGTERM)
        for running in self.running:
            process = running.process
            if process is None:
                continue
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                say(f"worker {running.worker.index} did not stop within {STOP_TIMEOUT:.0f} s: killed")
                process.kill()
                process.wait()
                self.status = self.status or 1
            running.process = None
        say("every worker stopped")

