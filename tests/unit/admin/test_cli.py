"""vmq-admin end to end: a real subprocess against the API served from a background thread with its own loop."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from admin.http import ApiServer, start_api
from admin.keys import KeyStore
from admin.scopes import Scope
from tests.unit.admin.fakes import FakeNode

REPO = Path(__file__).resolve().parents[3]


class ThreadedApi:
    """The API on its own event loop in a daemon thread, so that the test thread can block on a subprocess."""

    def __init__(self, facade: FakeNode, keys: KeyStore) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="admin-api", daemon=True)
        self.thread.start()
        future = asyncio.run_coroutine_threadsafe(start_api(facade, keys, "127.0.0.1", 0), self.loop)
        self.server: ApiServer = future.result(timeout=10)

    def close(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


@pytest.fixture
def served(fake: FakeNode, keys: KeyStore) -> Iterator[ApiServer]:
    api = ThreadedApi(fake, keys)
    try:
        yield api.server
    finally:
        api.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty current directory, so that ./data/api.key of the checkout is never picked up."""
    path = tmp_path / "cwd"
    path.mkdir()
    return path


def vmq_admin(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("VMQ_")}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "admin.cli.main", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_table_output(served: ApiServer, node_key: str, workdir: Path) -> None:
    done = vmq_admin(workdir, "--url", served.url, "--api-key", node_key, "cluster", "show")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "Node            Running  Reachable  Ready",
        "--------------  -------  ---------  -----",
        "vmq1@127.0.0.1  true     true       true",
    ]


def test_json_output_and_env_url_and_key(served: ApiServer, fake: FakeNode, node_key: str, workdir: Path) -> None:
    done = vmq_admin(workdir, "session", "show", "--json", env={"VMQ_ADMIN_URL": served.url, "VMQ_API_KEY": node_key})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {k: r.get(k) for k in ("client_id", "is_online", "mountpoint", "peer_host", "peer_port", "user", "node")}
        for r in fake.sessions
    ]


def test_key_from_data_dir(served: ApiServer, fake: FakeNode, data_dir: Path, node_key: str, workdir: Path) -> None:
    where = ("--url", served.url, "--data-dir", str(data_dir))
    done = vmq_admin(workdir, *where, "retain", "show", "topic=sensors/+/temp")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].split() == ["sensors/a/temp", "21.5"]
    assert fake.last_call() == ("retain_show", "sensors/+/temp", 100)
    done = vmq_admin(workdir, "node", "status", env={"VMQ_ADMIN_URL": served.url, "VMQ_DATA_DIR": str(data_dir)})
    assert done.returncode == 0 and "vmq1@127.0.0.1  true" in done.stdout


def test_changes_go_through_post(served: ApiServer, fake: FakeNode, node_key: str, workdir: Path) -> None:
    env = {"VMQ_ADMIN_URL": served.url, "VMQ_API_KEY": node_key}
    done = vmq_admin(workdir, "cluster", "join", "discovery-node=vmq2@127.0.0.1", env=env)
    assert (done.returncode, done.stdout) == (0, "Done\n")
    assert [r["Node"] for r in fake.members] == ["vmq1@127.0.0.1", "vmq2@127.0.0.1"]
    done = vmq_admin(workdir, "cluster", "leave", "node=vmq2@127.0.0.1", "-k", "-i", "1", "--timeout=2", env=env)
    assert (done.returncode, done.stdout) == (0, "vmq2@127.0.0.1 left the cluster\n")
    assert fake.last_call() == ("cluster_leave", "vmq2@127.0.0.1", True, 1.0, 2.0)
    done = vmq_admin(workdir, "set", "allow_publish_during_netsplit=on", env=env)
    assert (done.returncode, done.stdout) == (0, "allow_publish_during_netsplit = on\n")
    assert fake.settings["allow_publish_during_netsplit"] == "on"


def test_api_key_create_prints_key_once_with_a_note(
    served: ApiServer, keys: KeyStore, node_key: str, workdir: Path
) -> None:
    done = vmq_admin(workdir, "api-key", "create", env={"VMQ_ADMIN_URL": served.url, "VMQ_API_KEY": node_key})
    assert done.returncode == 0
    new_key = done.stdout.strip()
    assert keys.verify(new_key) and new_key != node_key
    assert "cannot show it again" in done.stderr


def test_node_error_exit_1_with_server_text(served: ApiServer, node_key: str, workdir: Path) -> None:
    env = {"VMQ_ADMIN_URL": served.url, "VMQ_API_KEY": node_key}
    done = vmq_admin(workdir, "cluster", "leave", "node=x@h", env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "vmq-admin: x@h is not a cluster member (HTTP 404)\n"


def test_wrong_key_exit_1(served: ApiServer, workdir: Path) -> None:
    done = vmq_admin(workdir, "--url", served.url, "--api-key", "not-the-key", "cluster", "show")
    assert (done.returncode, done.stdout) == (1, "")
    assert "the API key from --api-key is wrong" in done.stderr and "401" in done.stderr


def test_key_as_the_urls_user_name(served: ApiServer, fake: FakeNode, node_key: str, workdir: Path,
                                   tmp_path: Path) -> None:
    """VerneMQ writes the key as the URL's user name: vmq-admin sends it in a header (the node never challenges
    for basic credentials) and never prints it."""
    nowhere = str(tmp_path / "nowhere")
    with_key = served.url.replace("http://", f"http://{node_key}@")
    done = vmq_admin(workdir, "--url", with_key, "--data-dir", nowhere, "set", "max_inflight_messages=7")
    assert (done.returncode, done.stdout, done.stderr) == (0, "max_inflight_messages = 7\n", "")
    assert fake.settings["max_inflight_messages"] == "7"
    wrong = vmq_admin(workdir, "cluster", "show", env={"VMQ_ADMIN_URL": served.url.replace("http://", "http://nope:x@"),
                                                       "VMQ_DATA_DIR": nowhere})
    assert wrong.returncode == 1 and "the API key from the URL's user name is wrong" in wrong.stderr
    assert "nope" not in wrong.stderr


def test_missing_key_exit_1(served: ApiServer, workdir: Path, tmp_path: Path) -> None:
    done = vmq_admin(workdir, "--url", served.url, "--data-dir", str(tmp_path / "nowhere"), "cluster", "show")
    assert (done.returncode, done.stdout) == (1, "")
    assert "the API key is missing" in done.stderr and "nowhere/api.key" in done.stderr


def test_unreachable_node_exit_3(workdir: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    done = vmq_admin(workdir, "--url", url, "--api-key", "k", "cluster", "show")
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == f"vmq-admin: the node at {url} is not reachable (connection refused)\n"


def test_usage_error_sends_nothing(served: ApiServer, fake: FakeNode, node_key: str, workdir: Path) -> None:
    done = vmq_admin(workdir, "cluster", "join", "discovery-node=oops", env={"VMQ_ADMIN_URL": served.url})
    assert done.returncode == 2
    assert "bad value 'oops' for 'discovery-node'" in done.stderr
    assert not fake.calls


def test_console_script_installed(workdir: Path) -> None:
    script = shutil.which("vmq-admin", path=str(Path(sys.executable).parent))
    assert script, "vmq-admin is not installed next to the interpreter (pip install -e .)"
    done = subprocess.run([script, "--help"], cwd=workdir, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "usage: vmq-admin" in done.stdout


def test_a_trace_prints_its_lines(served: ApiServer, fake: FakeNode, node_key: str, workdir: Path) -> None:
    env = {"VMQ_ADMIN_URL": served.url, "VMQ_API_KEY": node_key}
    done = vmq_admin(workdir, "trace", "client", "client_id=c9", "--stop-after=1", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["line 0 of c9", "line 1 of c9", "line 2 of c9"]
    bad = vmq_admin(workdir, "trace", "client", "client-id=c9", "--stop-after=0", env=env)
    assert bad.returncode == 1 and "--stop-after must be more than 0" in bad.stderr


# -- the real vmq-admin ------------------------------------------------------------------------------------------
def node_conf(path: Path, api: ApiServer, data_dir: Path) -> Path:
    path.write_text(f"nodename = vmq1@127.0.0.1\nlistener.http.default = 0.0.0.0:{api.port}\n"
                    f"platform_data_dir = {data_dir}\n")
    return path


def test_vmq_admin_with_only_config(served: ApiServer, data_dir: Path, node_key: str, workdir: Path,
                                    tmp_path: Path) -> None:
    conf = node_conf(tmp_path / "vmqpy.conf", served, data_dir)
    done = vmq_admin(workdir, "--config", str(conf), "cluster", "show")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert "vmq1@127.0.0.1" in done.stdout
    done = vmq_admin(workdir, "api-key", "show", env={"VMQ_CONFIG": str(conf)})
    assert done.returncode == 0 and "true" in done.stdout, done.stderr


def test_vmq_admin_without_arguments_reads_the_default_path(served: ApiServer, data_dir: Path,
                                                            node_key: str, workdir: Path) -> None:
    node_conf(workdir / "vmqpy.conf", served, data_dir)
    done = vmq_admin(workdir, "node", "status")
    assert done.returncode == 0, done.stderr
    assert "vmq1@127.0.0.1" in done.stdout


def test_vmq_admin_explains_a_missing_config(workdir: Path) -> None:
    done = vmq_admin(workdir, "--config", "absent.conf", "cluster", "show")
    assert done.returncode == 2
    assert "cannot read the node's configuration absent.conf (--config)" in done.stderr


def test_vmq_admin_shows_a_scope_refusal(served: ApiServer, keys: KeyStore, workdir: Path) -> None:
    metrics_key = keys.create(Scope.METRICS)
    done = vmq_admin(workdir, "--url", served.url, "--api-key", metrics_key, "node", "stop")
    assert done.returncode == 1
    assert "'node stop' needs scope 'admin'" in done.stderr and "HTTP 403" in done.stderr


def test_an_unreadable_default_config_matters_only_when_needed(served: ApiServer, node_key: str,
                                                              workdir: Path) -> None:
    (workdir / "vmqpy.conf").mkdir()  # there, but cannot be read as a file
    done = vmq_admin(workdir, "cluster", "show")
    assert done.returncode == 2 and "(the default path)" in done.stderr and "sudo -u vmqpy" in done.stderr
    done = vmq_admin(workdir, "--url", served.url, "--api-key", node_key, "cluster", "show")
    assert (done.returncode, done.stderr) == (0, "")
