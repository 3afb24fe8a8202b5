"""The pure parts of the rolling restart and of `--via haproxy`: the restart schedule, the HAProxy configuration
rendered for an experiment's nodes, which runs are refused, the workloads through a balancer, and the outages
(time without a connection) read from a history."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.checkers.outages import check_outages, outages
from chaos.experiments import EXPERIMENTS, SUITE, by_name
from chaos.haproxy import SHIPPED, Server, render
from chaos.history import Event
from chaos.schedule import plan
from chaos.via import balanced_listener, balancer_host, effective_via, refusal, workloads
from tests.unit.chaos.histories import MS, H

SERVERS = [Server("n1", "127.0.0.31", 40001, 40011), Server("n2", "127.0.0.32", 40002, 40012),
           Server("n3", "127.0.0.33", 40003, 40013)]


# -- the schedule -------------------------------------------------------------------------------------------------
@given(st.integers(2, 9), st.integers(0, 10_000), st.floats(5.0, 300.0))
def test_every_node_is_rolled_exactly_once_in_order_of_time(nodes: int, seed: int, duration: float) -> None:
    steps = plan(by_name("rolling-restart"), nodes, seed, duration)
    assert [s.action for s in steps] == ["roll"] * nodes
    assert sorted(s.node for s in steps if s.node is not None) == list(range(nodes))
    times = [s.at for s in steps]
    assert times == sorted(times) and all(0 <= t <= duration for t in times)


def test_the_order_depends_on_the_seed_and_replays() -> None:
    e = by_name("rolling-restart")
    assert plan(e, 5, 1) == plan(e, 5, 1)
    assert len({tuple(s.node for s in plan(e, 5, seed)) for seed in range(20)}) > 1


def test_rolling_restart_is_not_in_the_suite_and_names_its_workloads() -> None:
    e = by_name("rolling-restart")
    assert e.rolling and e.balancer and e.faults == ()
    assert "rolling-restart" not in SUITE
    assert e.workloads == ("steady", "registration")
    assert plan(by_name("rolling-restart"), 3, 1)[0].describe(["a", "b", "c"]).startswith("roll ")


# -- the HAProxy configuration ------------------------------------------------------------------------------------
def rendered(proxy_protocol: bool = True) -> str:
    return render(SHIPPED.read_text(), ("127.0.0.34", 41000), SERVERS, Path("/tmp/x/haproxy.sock"), proxy_protocol)


def test_render_names_every_node_and_its_check_port_once() -> None:
    lines = [line.split() for line in rendered().splitlines()]
    servers = [w for w in lines if w[:1] == ["server"]]
    assert servers == [["server", "n1", "127.0.0.31:40001", "check", "port", "40011"],
                       ["server", "n2", "127.0.0.32:40002", "check", "port", "40012"],
                       ["server", "n3", "127.0.0.33:40003", "check", "port", "40013"]]
    assert [w for w in lines if w[:1] == ["bind"]] == [["bind", "127.0.0.34:41000"]]
    assert ["stats", "socket", "/tmp/x/haproxy.sock", "mode", "600", "level", "admin"] in lines


def test_render_runs_in_the_foreground_as_this_user_and_keeps_the_rest() -> None:
    text = rendered()
    words = {line.split()[0] for line in text.splitlines() if line.split()}
    assert not words & {"daemon", "chroot", "user", "group"}
    assert "log stderr format raw local0" in text and "/dev/log" not in text
    shipped_maxconn = [line for line in SHIPPED.read_text().splitlines() if line.split()[:1] == ["maxconn"]]
    assert len(shipped_maxconn) == 1 and shipped_maxconn[0] in text.splitlines()  # as shipped, not rewritten
    for kept in ("mqtt_is_valid", "stick-table type string len 256", "option httpchk GET /health",
                 "send-proxy-v2", "option redispatch"):
        assert kept in text, kept


def test_without_the_proxy_protocol_no_header_is_sent() -> None:
    active = [line for line in rendered(False).splitlines() if not line.lstrip().startswith("#")]
    assert not any("send-proxy-v2" in line for line in active)


def test_without_stickiness_no_stick_table_or_rule_is_left() -> None:
    text = render(SHIPPED.read_text(), ("127.0.0.34", 41000), SERVERS, Path("/s"), True, sticky=False)
    active = [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert not [w for w in active if w[0] in ("stick", "stick-table") or w[:2] == ["acl", "has_client_id"]]
    assert ["balance", "leastconn"] in active


@pytest.mark.parametrize("shipped", ["global\n    maxconn 1\n", "frontend f\n    bind :1\n"])
def test_render_refuses_a_file_without_server_or_bind_lines(shipped: str) -> None:
    with pytest.raises(ValueError):
        render(shipped, ("127.0.0.1", 1), SERVERS, Path("/s"), True)


def test_render_refuses_no_servers() -> None:
    with pytest.raises(ValueError):
        render(SHIPPED.read_text(), ("127.0.0.1", 1), [], Path("/s"), True)


# -- via ----------------------------------------------------------------------------------------------------------
def test_rolling_restart_always_goes_through_haproxy() -> None:
    assert effective_via(by_name("rolling-restart"), "direct") == "haproxy"
    assert effective_via(by_name("partition-halves"), "direct") == "direct"
    assert effective_via(by_name("partition-halves"), "haproxy") == "haproxy"
    with pytest.raises(ValueError):
        effective_via(by_name("partition-halves"), "nginx")


def test_refusals_say_why() -> None:
    e = by_name("partition-halves")
    assert refusal(e, "direct", attached=True, haproxy_missing="no haproxy") is None
    assert refusal(e, "haproxy", attached=False, haproxy_missing=None) is None
    missing = refusal(e, "haproxy", attached=False, haproxy_missing="HAProxy is not installed")
    assert missing == "--via haproxy, but HAProxy is not installed"
    attached = refusal(by_name("rolling-restart"), "haproxy", attached=True, haproxy_missing=None)
    assert attached is not None and "cannot attach" in attached and "rolling-restart" in attached


def test_the_balanced_listener_expects_the_proxy_header() -> None:
    assert balanced_listener("127.0.0.31", 5000) == {"listener.tcp.balanced": "127.0.0.31:5000",
                                                     "listener.tcp.balanced.proxy_protocol": "on"}
    assert balancer_host("127.0.0.31", 3) == "127.0.0.34"


@pytest.mark.parametrize("experiment", [e for e in EXPERIMENTS if not e.rolling], ids=lambda e: e.name)
def test_through_a_balancer_queues_becomes_steady(experiment: object) -> None:
    from chaos.schedule import Experiment

    assert isinstance(experiment, Experiment)
    names = workloads(experiment, "haproxy")
    assert "queues" not in names and len(names) == len(set(names))
    assert ("steady" in names) == ("queues" in experiment.workloads)
    assert workloads(experiment, "direct") == experiment.workloads


# -- outages ------------------------------------------------------------------------------------------------------
def connect(h: H, process: str, start: int, end: int, outcome: str = "ok") -> None:
    h.op(process, "connect", {"client": process}, "haproxy", start, end, outcome)


def end(h: H, process: str, at: int, f: str = "server-disconnect") -> None:
    h.events.append(Event("info", process, f, {"client": process}, "haproxy", at * MS))


def test_an_outage_runs_from_the_end_to_the_next_accepted_connect() -> None:
    h = H()
    connect(h, "steady-sub0", 0, 10)
    end(h, "steady-sub0", 1000)
    connect(h, "steady-sub0", 1100, 1200, "fail")  # refused: still without a connection
    connect(h, "steady-sub0", 1300, 3000)
    end(h, "steady-sub0", 5000, "lost")
    connect(h, "steady-sub0", 5000, 5500)
    found = outages(h.ops(), "steady-")
    assert [(o.start // MS, o.end // MS if o.end else None) for o in found] == [(1000, 3000), (5000, 5500)]
    check = check_outages(h.ops(), "steady-", "steady-sub")
    assert check.safe is True
    assert check.figures["outage_s"] == {"p50": 0.5, "p99": 2.0, "max": 2.0}
    assert check.figures["per_client_total_s"]["max"] == 2.5


def test_a_disconnect_the_client_asked_for_is_not_an_outage_and_other_processes_are_ignored() -> None:
    h = H()
    connect(h, "steady-pub0", 0, 10)
    h.op("steady-pub0", "disconnect", {"client": "p"}, "haproxy", 100, 110)
    connect(h, "steady-pub0", 5000, 5010)
    connect(h, "reg0", 0, 10)
    end(h, "reg0", 100)
    check = check_outages(h.ops(), "steady-", "steady-sub")
    assert check.figures["outages"] == 0 and check.figures["clients"] == 1 and check.safe is True


def test_a_subscriber_never_back_fails_a_publisher_stopped_while_away_does_not() -> None:
    h = H()
    for process in ("steady-sub1", "steady-pub1"):
        connect(h, process, 0, 10)
        end(h, process, 100)
    check = check_outages(h.ops(), "steady-", "steady-sub")
    assert check.safe is False and check.figures["never_back"] == ["steady-sub1"]
    assert check.figures["outages"] == 2 and check.figures["outage_s"]["max"] is None


def test_nothing_measured_is_not_checked() -> None:
    check = check_outages(H().ops(), "steady-", "steady-sub")
    assert check.safe is None and check.figures["clients"] == 0
