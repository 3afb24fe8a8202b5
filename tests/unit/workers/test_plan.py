"""vmqpy.workers.plan: what each worker of `vmqpy start --workers N` is, and what a plan refuses (table tests on
real configurations, `config.load` with `--set` flags as `vmqpy start` reads them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmqpy import config
from vmqpy.workers.plan import MAX_WORKERS, WorkersRefused, plan

BASE = ["nodename=hub@127.0.0.1", "listener.tcp.default=127.0.0.1:1883", "listener.vmq.clustering=127.0.0.1:44053",
        "platform_data_dir=/srv/vmqpy/data"]


def load(*flags: str) -> config.Config:
    """BASE with `flags` on top; a flag `-KEY` leaves KEY of BASE out."""
    dropped = {flag[1:] for flag in flags if flag.startswith("-")}
    kept = [flag for flag in BASE if flag.split("=", 1)[0] not in dropped]
    return config.load(None, flags=[*kept, *(flag for flag in flags if not flag.startswith("-"))])


def values(overrides: tuple[str, ...]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in overrides)


def test_worker_1_is_the_configured_node_and_the_others_follow_it() -> None:
    workers = plan(load("listener.http.default=127.0.0.1:8888"), 3)
    assert [w.index for w in workers] == [1, 2, 3]
    assert [w.nodename for w in workers] == ["hub@127.0.0.1", "hub-w2@127.0.0.1", "hub-w3@127.0.0.1"]
    assert [w.data_dir for w in workers] == [Path("/srv/vmqpy/data"), Path("/srv/vmqpy/data-w2"),
                                             Path("/srv/vmqpy/data-w3")]
    assert values(workers[0].overrides) == {"listener.reuse_port": "on"}
    assert values(workers[2].overrides) == {
        "listener.reuse_port": "on", "nodename": "hub-w3@127.0.0.1", "platform_data_dir": "/srv/vmqpy/data-w3",
        "listener.vmq.clustering": "127.0.0.1:44055", "cluster.discovery": "hub@127.0.0.1:44053",
        "listener.http.default": "127.0.0.1:8890",
    }


def test_a_worker_configuration_is_a_valid_node_configuration() -> None:
    for worker in plan(load("listener.http.default=127.0.0.1:8888", "log.file=/var/log/vmqpy/console.log",
                            "metadata.replication_log=/var/log/vmqpy/repl.log"), 2):
        cfg = load("listener.http.default=127.0.0.1:8888", "log.file=/var/log/vmqpy/console.log",
                   "metadata.replication_log=/var/log/vmqpy/repl.log", *worker.overrides)
        assert cfg.nodename == worker.nodename and cfg.data_dir == worker.data_dir and cfg.reuse_port
        if worker.index == 2:
            assert cfg.log_file == Path("/var/log/vmqpy/console-w2.log")
            assert cfg.replication_log == Path("/var/log/vmqpy/repl-w2.log")
            assert cfg.cluster_discovery == ("hub@127.0.0.1:44053",)
            assert cfg.cluster_listener == ("127.0.0.1", 44054)


def test_the_configured_discovery_stays_after_worker_1() -> None:
    workers = plan(load("cluster.discovery=other@10.0.0.2:44053"), 2)
    assert values(workers[1].overrides)["cluster.discovery"] == "hub@127.0.0.1:44053,other@10.0.0.2:44053"
    assert "cluster.discovery" not in values(workers[0].overrides)


def test_an_admin_port_0_and_an_unset_https_stay_as_they_are() -> None:
    second = values(plan(load("listener.http.default=127.0.0.1:0"), 2)[1].overrides)
    assert "listener.http.default" not in second and "listener.https.default" not in second


@pytest.mark.parametrize(("flags", "count", "refusal"), [
    ((), 0, "give a count from 1"),
    ((), MAX_WORKERS + 1, "give a count from 1"),
    (("-listener.vmq.clustering",), 2, "needs listener.vmq.clustering"),
    (("listener.vmq.clustering=127.0.0.1:0",), 2, "a fixed port on listener.vmq.clustering"),
    (("listener.tcp.default=127.0.0.1:0",), 2, "a fixed port on listener.tcp.default"),
    (("listener.vmq.clustering=127.0.0.1:65535",), 2, "would need port 65536"),
    (("listener.http.default=127.0.0.1:65534",), 3, "listener.http.default = 127.0.0.1:65534: worker 3"),
])
def test_a_plan_is_refused_with_the_key_to_change(flags: tuple[str, ...], count: int, refusal: str) -> None:
    with pytest.raises(WorkersRefused, match=refusal.replace(".", r"\.")):
        plan(load(*flags), count)


def test_one_worker_is_the_node_alone_with_its_port_shared() -> None:
    [only] = plan(load(), 1)
    assert only.nodename == "hub@127.0.0.1" and only.overrides == ("listener.reuse_port=on",)
