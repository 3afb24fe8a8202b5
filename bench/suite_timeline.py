"""A pytest plugin for `bench.suite_cpu`: each test's start and end, per xdist worker, and each worker's PID.

Loaded with `-p bench.suite_timeline` (bench.suite_cpu puts that in PYTEST_ADDOPTS); writes into the folder
$SUITE_CPU_DIR `pid-WORKER` (the worker's PID, at configure time) and `timeline-WORKER.tsv` (start, end, node id)."""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any, TextIO

import pytest

_OUT: list[TextIO] = []


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _folder() -> Path | None:
    folder = os.environ.get("SUITE_CPU_DIR")
    return Path(folder) if folder else None


def pytest_configure(config: pytest.Config) -> None:
    folder = _folder()
    if folder is not None:
        (folder / f"pid-{_worker()}").write_text(str(os.getpid()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    folder = _folder()
    if folder is not None and not _OUT:
        _OUT.append((folder / f"timeline-{_worker()}.tsv").open("a", encoding="utf-8"))
    started = time.time()
    result = yield
    if _OUT:
        _OUT[0].write(f"{started:.2f}\t{time.time():.2f}\t{item.nodeid}\n")
        _OUT[0].flush()
    return result
