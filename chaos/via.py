"""How the clients of an experiment reach the cluster: `direct` (each workload picks nodes by name) or `haproxy`
(only through one real HAProxy in front of the nodes, with the shipped configuration; `--via haproxy`, and always
for `rolling-restart`). Pure: which runs are refused and why, the listener each node opens for HAProxy, where
HAProxy listens, and which workloads run.

Through HAProxy every node keeps its plain MQTT listener (`listener.tcp.default`, for the harness's own final
reads) and gets a second one, `listener.tcp.balanced`, with `proxy_protocol = on`, which HAProxy's server lines
name (HAProxy sends `send-proxy-v2`, as shipped). The `queues` workload addresses each node by name (one offline
subscriber per node, published to on the others): through a balancer a client cannot choose its node, so it is
replaced by `steady` (persistent QoS 1 subscribers and publishers that reconnect through HAProxy), whose
publishes and drains the same queues checker judges."""

from __future__ import annotations

from chaos.ports import host_of
from chaos.schedule import Experiment

VIAS = ("direct", "haproxy")
BALANCED_LISTENER = "balanced"
#: Workloads that address nodes by name, and what runs instead of each through a balancer.
THROUGH_BALANCER = {"queues": "steady"}


def effective_via(experiment: Experiment, requested: str) -> str:
    """`haproxy` when asked for or when the experiment always needs it."""
    if requested not in VIAS:
        raise ValueError(f"--via must be one of {', '.join(VIAS)}, not {requested!r}")
    return "haproxy" if experiment.balancer else requested


def refusal(experiment: Experiment, via: str, attached: bool, haproxy_missing: str | None) -> str | None:
    """Why this run cannot go through HAProxy (a sentence for the user), or None."""
    if via != "haproxy":
        return None
    why = f"{experiment.name} sends its clients through HAProxy" if experiment.balancer else "--via haproxy"
    if haproxy_missing is not None:
        return f"{why}, but {haproxy_missing}"
    if attached:
        return (f"{why}: it cannot attach to a running cluster (its nodes need a listener with "
                "proxy_protocol = on, which the harness configures itself)")
    return None


def balanced_listener(host: str, port: int) -> dict[str, str]:
    """The configuration keys of the listener a node opens for HAProxy."""
    return {f"listener.tcp.{BALANCED_LISTENER}": f"{host}:{port}",
            f"listener.tcp.{BALANCED_LISTENER}.proxy_protocol": "on"}


def balancer_host(base: str, nodes: int) -> str:
    """HAProxy's address: the loopback address after the last node's (a partition between nodes never cuts the
    balancer off; a node the balancer cannot reach is taken out by its health check)."""
    return host_of(base, nodes)


def workloads(experiment: Experiment, via: str) -> tuple[str, ...]:
    """The workloads of a run, in order, without repeats."""
    names = experiment.workloads if via == "direct" else tuple(THROUGH_BALANCER.get(w, w)
                                                                for w in experiment.workloads)
    return tuple(dict.fromkeys(names))
