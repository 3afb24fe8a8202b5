"""The log level of a running node changes at once (`vmq-admin set log.console.level`, `vmq-admin log level`)."""

from __future__ import annotations

import urllib.request

import pytest

from tests.integration.admin_api import admin
from tests.integration.conftest import free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("the vmqpy admin API")]


def debug_lines(log_text: str, client_id: str) -> list[str]:
    return [line for line in log_text.splitlines() if "[debug" in line and client_id in line]


def test_debug_lines_start_and_stop_when_the_level_changes(broker_factory, clients) -> None:  # type: ignore[no-untyped-def]
    http_port = free_port()
    broker = broker_factory(**{"listener.http.default": f"127.0.0.1:{http_port}"})
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    clients.paho(broker, 4, client_id="lvl-before").disconnect()  # the node's loggers are made and cached here
    answer = admin(url, broker.data_dir, "set", "log.console.level=debug")
    assert answer.returncode == 0 and "debug" in answer.stdout, answer.stderr
    clients.paho(broker, 4, client_id="lvl-debug").disconnect()
    wait_until(lambda: debug_lines(broker.log.read_text(), "lvl-debug"), 10, what="a debug line for lvl-debug")
    answer = admin(url, broker.data_dir, "log", "level", "level=info")
    assert answer.returncode == 0 and "log.console.level = info" in answer.stdout, answer.stderr
    clients.paho(broker, 4, client_id="lvl-info").disconnect()
    shown = admin(url, broker.data_dir, "log", "level")
    assert shown.returncode == 0 and "info" in shown.stdout
    text = broker.log.read_text()
    assert debug_lines(text, "lvl-debug") and not debug_lines(text, "lvl-info") and not debug_lines(text, "lvl-before")
    bad = admin(url, broker.data_dir, "log", "level", "level=loud")
    assert bad.returncode != 0 and "loud" in bad.stderr
