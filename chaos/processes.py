"""Every node process the harness started, by PID: start one with its output in a log file, stop one (SIGCONT,
SIGTERM, then SIGKILL), kill one, and stop every one still running when the harness exits. A process is only
ever signalled through the PID it was started with, never found by name. A `python -m vmqpy` command is forked
from the zygote (chaos/zygote.py: a child of another process, still stopped and killed by its PID here)."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
from pathlib import Path

from chaos import zygote
from chaos.zygote import NodeProcess

STOP_GRACE_S = 10.0  # how long a SIGTERM may take before SIGKILL

_live: dict[int, NodeProcess] = {}


def spawn(command: list[str], log: Path, cwd: Path, env: dict[str, str]) -> NodeProcess:
    """Start `command` in a session of its own, stdout and stderr appended to `log` (a node: forked from the
    zygote, chaos.zygote.popen)."""
    with log.open("ab") as out:
        proc = zygote.popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=str(cwd), env=env, start_new_session=True)
    _live[proc.pid] = proc
    return proc


def stop(proc: NodeProcess) -> None:
    """SIGCONT (a paused process cannot stop), SIGTERM, then SIGKILL after STOP_GRACE_S: by PID only."""
    if proc.poll() is None:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                break
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(STOP_GRACE_S)
    _live.pop(proc.pid, None)


def kill(proc: NodeProcess) -> None:
    """SIGKILL (`kill -9`) and wait for the exit."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(STOP_GRACE_S)
    _live.pop(proc.pid, None)


def stop_all() -> None:
    """Stop every process started here that still runs (by PID)."""
    for proc in list(_live.values()):
        try:
            stop(proc)
        except (OSError, subprocess.SubprocessError):
            pass


atexit.register(stop_all)
