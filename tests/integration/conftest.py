"""Fixtures for the single-node end-to-end suite.

Which broker runs is chosen by the environment variable BROKER_UNDER_TEST:
  unset or "vmqpy"  ->  <sys.executable> -m vmqpy start --config <generated file>
  "mosquitto"       ->  /usr/sbin/mosquitto -c <generated file>   (reference broker used to validate the tests)

Tests marked `vmqpy_only` are skipped under mosquitto by the autouse fixture below.
Every broker listens on 127.0.0.1 only, on a free port found by binding port 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaos import ports, zygote
from chaos.zygote import NodeProcess
from tests import lanes, randomness
from tests.integration.clients import HOST, PahoClient, RawClient, unique

REPO = Path(__file__).resolve().parents[2]
MOSQUITTO = "/usr/sbin/mosquitto"
START_DEADLINE = 15.0


def broker_kind() -> str:
    kind = os.environ.get("BROKER_UNDER_TEST", "vmqpy").strip().lower() or "vmqpy"
    if kind not in ("vmqpy", "mosquitto"):
        raise pytest.UsageError(f"BROKER_UNDER_TEST must be 'vmqpy' or 'mosquitto', not {kind!r}")
    return kind


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "vmqpy_only(reason): behaviour only vmqpy provides; skipped when BROKER_UNDER_TEST=mosquitto")


@pytest.fixture(scope="module", autouse=True)
def _lane(request: pytest.FixtureRequest) -> lanes.Placement:
    """Before any fixture of the module starts a node: the address block and iptables chain of its lane
    (tests/lanes.py)."""
    return lanes.place(lanes.module_lane(Path(str(request.module.__file__))))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    item.stash[_SETUP_AT] = time.monotonic()
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    if rep.failed and rep.when == "call":
        _attach_node_logs(item, rep)
    return rep


_SETUP_AT = pytest.StashKey[float]()


def _attach_node_logs(item: pytest.Item, rep: pytest.TestReport) -> None:
    """A failed cluster test shows the end of the log of every node it used (started during the test, or a
    module's nodes still running): CI keeps nothing else of a run."""
    from tests.integration.cluster import STARTED  # imported late: cluster.py imports this module

    since = item.stash.get(_SETUP_AT, 0.0)
    for node in STARTED:
        if node.started_at >= since or node.proc is not None:
            rep.sections.append((f"{node.name} log (last 60 lines)", node.log_tail(60)))


def free_port(host: str = HOST) -> int:
    """A free port on `host`, never one this test process handed out before (to a broker or a cluster node):
    a port is free again as soon as its probing socket closes, so two calls in a row (a node's MQTT, admin and
    cluster ports) could otherwise get the same one."""
    return ports.free_port(host)


def port_open(port: int, host: str = HOST) -> bool:
    return ports.port_open(host, port)


def chosen_seed(fixed: int = 20261129) -> int:
    """The seed of a randomized test: `fixed` under the `ci` profile (`make test`), a fresh one under `long`, or
    `TEST_SEED` from the environment to replay a printed one (tests/randomness.py)."""
    return randomness.seed("TEST_SEED", fixed)


def health(url: str) -> int | None:
    """The status of GET `url`/health (None while nothing answers)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None


def public_metrics(http_port: int, names: Iterable[str]) -> dict[str, float]:
    """The samples `names` of a node's GET /metrics on 127.0.0.1:`http_port` (`metrics.public = on`), each keyed
    as it is written there without the node label: `name` or `name{label="value"}`; a sample the node does not
    export is missing from the answer."""
    wanted = set(names)
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()) if k != "node")
            key = f"{sample.name}{{{labels}}}" if labels else sample.name
            if key in wanted:
                out[key] = sample.value
    return out


def wait_until(cond: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll cond() until it returns a truthy value; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# vmqpy keys that mosquitto has an equivalent for
_MOSQUITTO_EQUIV = {
    "max_inflight_messages": "max_inflight_messages",
    "max_offline_messages": "max_queued_messages",
    "max_online_messages": "max_queued_messages",
    "max_message_size": "max_packet_size",
}


def vmqpy_config_text(port: int, data_dir: Path, extra: dict[str, Any]) -> str:
    conf = {
        "nodename": "vmqpy@127.0.0.1",
        "platform_data_dir": str(data_dir),
        "listener.tcp.default": f"{HOST}:{port}",
        "allow_anonymous": "on",
        "log.console": "console",
        "log.console.level": "info",
    }
    conf.update({k: str(v) for k, v in extra.items()})
    return "# generated by tests/integration/conftest.py\n" + "".join(f"{k} = {v}\n" for k, v in conf.items())


def mosquitto_config_text(port: int, data_dir: Path, extra: dict[str, Any]) -> str:
    lines = [
        "# generated by tests/integration/conftest.py",
        "user root",
        f"listener {port} {HOST}",
        "allow_anonymous true",
        "persistence true",
        f"persistence_location {data_dir}/",
        "persistence_file mosquitto.db",
        "autosave_interval 1",
        "log_dest stderr",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
        "log_timestamp_format %H:%M:%S",
        "max_inflight_messages 20",
        "max_queued_messages 1000",
    ]
    opts: dict[str, str] = {}
    for k, v in extra.items():
        if k in _MOSQUITTO_EQUIV:
            opts[_MOSQUITTO_EQUIV[k]] = str(v)
        elif k == "persistent_client_expiration" and str(v) != "never":
            opts["persistent_client_expiration"] = str(v)
    lines += [f"{k} {v}" for k, v in opts.items()]
    return "\n".join(lines) + "\n"


class Broker:
    """One broker process. start()/stop()/kill9()/restart() keep the port and the data dir."""

    def __init__(self, kind: str, workdir: Path, extra: dict[str, Any] | None = None):
        self.kind = kind
        self.host = HOST
        self.port = free_port()
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "broker.log"
        self.config_file = workdir / ("mosquitto.conf" if kind == "mosquitto" else "vmqpy.conf")
        self.extra = dict(extra or {})
        self.proc: NodeProcess | None = None
        self.exit_codes: list[int] = []
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        if self.kind == "mosquitto":
            return [MOSQUITTO, "-c", str(self.config_file)]
        return [sys.executable, "-m", "vmqpy", "start", "--config", str(self.config_file)]

    def write_config(self) -> None:
        text = (mosquitto_config_text if self.kind == "mosquitto" else vmqpy_config_text)(
            self.port, self.data_dir, self.extra)
        self.config_file.write_text(text)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "<no log>"
        return "\n".join(lines[-n:])

    def start(self) -> Broker:
        assert not self.alive(), "broker already running"
        self.write_config()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        self.starts += 1
        with open(self.log, "ab") as logf:
            logf.write(f"---- start #{self.starts}: {' '.join(self.command())}\n".encode())
            logf.flush()
            # A vmqpy node is forked from the zygote (chaos.zygote.popen); mosquitto's command is started as is.
            self.proc = zygote.popen(self.command(), stdout=logf, stderr=subprocess.STDOUT, cwd=str(REPO),
                                     env=env, start_new_session=True)
        deadline = time.monotonic() + START_DEADLINE
        while not (port_open(self.port) and self._all_listeners_open(self.starts)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode} before listening on "
                                   f"{self.port}:\n{self.log_tail()}")
            if time.monotonic() >= deadline:
                self._kill()
                raise RuntimeError(f"{self.kind} not listening on {self.port} within {START_DEADLINE}s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.05)
        return self

    def _all_listeners_open(self, start: int) -> bool:
        """A vmqpy node opens its listeners one after another and logs "node started" once all are open: a test that
        reaches a second listener (TLS, WebSocket) waits for that line of this start, not only for the first port.
        Without the line (mosquitto, a console log above info) the first port is all there is to wait for."""
        if self.kind != "vmqpy" or self.extra.get("log.console", "console") != "console" or \
                str(self.extra.get("log.console.level", "info")) not in ("debug", "info"):
            return True
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return False
        return "node started" in text.rsplit(f"---- start #{start}:", 1)[-1]

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code (None if it was not running)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        rc = self.proc.returncode
        self.exit_codes.append(rc)
        self.proc = None
        return rc

    def kill9(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, "broker not running"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.exit_codes.append(self.proc.returncode)
        self.proc = None

    def restart(self) -> Broker:
        if self.alive():
            self.stop()
        return self.start()

    # convenience constructors for clients of this broker
    def raw(self, version: int = 4) -> RawClient:
        return RawClient(self.port, self.host, version)


@pytest.fixture(autouse=True)
def _vmqpy_only_skip(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("vmqpy_only")
    if marker is not None and broker_kind() == "mosquitto":
        reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "vmqpy-specific behaviour")
        pytest.skip(f"vmqpy_only: {reason}")


@pytest.fixture
def kind() -> str:
    return broker_kind()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[list[Any]]:
    """Two cluster nodes (the block's .11-.12) started side by side and joined; stopped after the test."""
    yield from _cluster_of(tmp_path, 2)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Any]]:
    """Three cluster nodes (the block's .11-.13) in the default (stop-serving) mode, joined; stopped after the test."""
    yield from _cluster_of(tmp_path, 3)


def _cluster_of(tmp_path: Path, count: int) -> Iterator[list[Any]]:
    from tests.integration.cluster import start_cluster  # imported late: cluster.py imports this module

    nodes = start_cluster(tmp_path, count=count)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def broker_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Broker]]:
    """broker_factory(**extra_config) -> a started Broker with extra vmqpy config keys."""
    brokers: list[Broker] = []

    def make(**extra: Any) -> Broker:
        b = Broker(broker_kind(), tmp_path / f"node{len(brokers)}", extra)
        brokers.append(b)
        return b.start()

    yield make
    died = [b for b in brokers if b.proc is not None and b.proc.poll() is not None]
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for b in brokers:
        b.stop()
        if failed or b in died:
            sys.stdout.write(f"\n---- {b.kind} log ({b.log}):\n{b.log_tail(60)}\n")
    if died:
        pytest.fail(f"broker process died during the test: exit codes {[b.exit_codes for b in died]}",
                    pytrace=False)


@pytest.fixture
def broker(broker_factory: Callable[..., Broker]) -> Broker:
    """A fresh broker (default configuration, empty data dir) for this test only."""
    return broker_factory()


@pytest.fixture
def fresh_broker(broker_factory: Callable[..., Broker]) -> Broker:
    """Same as `broker`, for modules that rebind `broker` to the shared one."""
    return broker_factory()


@pytest.fixture(scope="module")
def _module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(broker_kind(), tmp_path_factory.mktemp("shared-broker"))
    yield b
    b.stop()


@pytest.fixture
def shared_broker(_module_broker: Broker, request: pytest.FixtureRequest) -> Iterator[Broker]:
    """One broker (default configuration) shared by the tests of a module, to keep the suite fast: starting a
    node costs ~0.5-1 s. Modules opt in by rebinding `broker` to it; their tests use unique client ids and
    topics and do not depend on each other's state. A test that leaves the broker dead fails, and the next
    test gets a restarted one (same data dir)."""
    b = _module_broker
    if not b.alive():
        if b.proc is not None:
            b.stop()  # collect the exit code of a broker that died earlier
        b.start()
    yield b
    died = not b.alive()
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed or died:
        sys.stdout.write(f"\n---- shared {b.kind} log ({b.log}), tail:\n{b.log_tail(60)}\n")
    if died:
        pytest.fail(f"shared broker process died during the test (exit code {b.proc.poll() if b.proc else None})",
                    pytrace=False)


class Clients:
    """Creates paho and raw clients and closes all of them at teardown."""

    def __init__(self) -> None:
        self._paho: list[PahoClient] = []
        self._raw: list[RawClient] = []

    def paho(self, broker: Broker, version: int = 5, client_id: str | None = None, connect: bool = True,
             **kw: Any) -> PahoClient:
        c = PahoClient(broker.port, version, client_id if client_id is not None else unique("paho"), **kw)
        self._paho.append(c)
        if connect:
            c.connect()
        return c

    def raw(self, broker: Broker, version: int = 4, client_id: str | None = None, connect: bool = True,
            **kw: Any) -> RawClient:
        c = RawClient(broker.port, broker.host, version)
        self._raw.append(c)
        if connect:
            c.connect(client_id if client_id is not None else unique("raw"), **kw)
        return c

    def close_all(self) -> None:
        for c in self._paho:
            try:
                c.client.disconnect()
            except Exception:
                pass
            c.stop()
        for r in self._raw:
            r.close()


@pytest.fixture
def clients() -> Iterator[Clients]:
    c = Clients()
    yield c
    c.close_all()


def assert_serving(broker: Broker, version: int = 4) -> None:
    """The broker process is alive and a QoS 1 round trip between two fresh clients works."""
    assert broker.alive(), f"broker process is not running:\n{broker.log_tail()}"
    topic = unique("alive/")
    sub = RawClient(broker.port, broker.host, version)
    pub = RawClient(broker.port, broker.host, version)
    try:
        sub.connect(unique("alive-sub"))
        sub.subscribe(topic, qos=1)
        pub.connect(unique("alive-pub"))
        pub.publish(topic, b"ping", qos=1)
        [m] = sub.recv_publishes(1)
        assert (m.topic, m.payload) == (topic, b"ping")
    finally:
        sub.close()
        pub.close()
