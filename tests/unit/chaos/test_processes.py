"""Stopping a process the harness started: by its PID, also when it is paused, and forgotten once stopped.
The process is `sleep`, not a node."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from chaos import processes
from chaos.zygote import NodeProcess

SLEEP = shutil.which("sleep")
pytestmark = pytest.mark.skipif(SLEEP is None, reason="needs the sleep command")


def _sleeper(tmp_path: Path) -> NodeProcess:
    assert SLEEP is not None
    return processes.spawn([SLEEP, "30"], tmp_path / "sleep.log", tmp_path, {})


def test_a_paused_process_is_still_stopped_with_sigterm(tmp_path: Path) -> None:
    proc = _sleeper(tmp_path)
    os.kill(proc.pid, signal.SIGSTOP)
    processes.stop(proc)
    assert proc.returncode == -signal.SIGTERM
    assert proc.pid not in processes._live


def test_kill_is_sigkill_and_stop_all_stops_what_is_left(tmp_path: Path) -> None:
    killed, left = _sleeper(tmp_path), _sleeper(tmp_path)
    processes.kill(killed)
    assert killed.returncode == -signal.SIGKILL
    processes.stop_all()
    assert left.returncode == -signal.SIGTERM
    assert killed.pid not in processes._live and left.pid not in processes._live
