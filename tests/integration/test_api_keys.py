"""Cluster-wide API keys with scopes, on three real nodes and the real `vmq-admin`: a key made on n1 works on every
node (also after a restart and on a node that joins later), a `metrics` key scrapes /metrics everywhere and gets 403
for `node stop`, `cluster leave` and a show command, a `read` key shows but does not change, an expired key is 401,
a deleted key stops working on every node; `vmq-admin` beside its node needs only --config, or nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from chaos import zygote
from tests.integration.admin_api import VMQ_ADMIN
from tests.integration.cluster import ClusterNode
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's API keys")]

REPLICATION_DEADLINE = 20.0  # seconds for a key's write or delete to reach every member
REPO = Path(__file__).resolve().parents[2]


def http(node: ClusterNode, method: str, path: str, key: str | None) -> tuple[int, Any]:
    """One request; (status, JSON body or the text of /metrics)."""
    request = urllib.request.Request(node.url + path, method=method, data=b"" if method == "POST" else None,
                                     headers={"x-api-key": key} if key is not None else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read()
            if answer.headers.get_content_type() == "application/json":
                return answer.status, json.loads(body)
            return answer.status, body.decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def created_key(node: ClusterNode, *params: str) -> str:
    answer = node.admin("api-key", "create", *params)
    assert answer.returncode == 0, answer.stderr
    return answer.stdout.strip()


def status_on(nodes: list[ClusterNode], method: str, path: str, key: str) -> list[int]:
    return [http(node, method, path, key)[0] for node in nodes]


def wait_for_status(nodes: list[ClusterNode], method: str, path: str, key: str, status: int, what: str) -> None:
    wait_until(lambda: status_on(nodes, method, path, key) == [status] * len(nodes), REPLICATION_DEADLINE,
               interval=0.1, what=what)


def vmq_admin_beside(node: ClusterNode, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real `vmq-admin` as an operator runs it on the node's host: no URL, no key, no data directory given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMQ")}
    env["PYTHONPATH"] = str(REPO)
    return zygote.run([*VMQ_ADMIN, *args], capture_output=True, text=True, timeout=60, env=env, cwd=str(cwd))


def test_a_metrics_key_works_on_every_node_and_cannot_stop_one(cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = cluster
    metrics = created_key(n1, "scope=metrics")
    wait_for_status(cluster, "GET", "/metrics", metrics, 200, "the metrics key made on n1 scrapes every node")
    for node in cluster:
        for method, path in [("POST", "/api/v1/node/stop"), ("POST", f"/api/v1/cluster/leave?node={n3.name}"),
                             ("GET", "/api/v1/cluster/show"), ("GET", "/api/v1/session/show"),
                             ("GET", "/status.json")]:
            status, body = http(node, method, path, metrics)
            assert status == 403, (node.name, path, status, body)
            assert "scope is 'metrics'" in body["error"] and metrics not in body["error"]
    assert "needs scope 'admin'" in http(n2, "POST", "/api/v1/node/stop", metrics)[1]["error"]
    assert all(node.pid is not None for node in cluster)
    assert [len(node.show()) for node in cluster] == [3, 3, 3]  # nobody stopped or left
    refused = n2.admin("node", "stop", key=metrics)  # the real vmq-admin says why
    assert refused.returncode == 1 and "'node stop' needs scope 'admin'" in refused.stderr
    assert n2.pid is not None and n2.health()[0] == 200


def test_a_read_key_shows_but_does_not_change_and_an_expired_key_is_refused(cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = cluster
    read = created_key(n3, "scope=read")
    wait_for_status(cluster, "GET", "/api/v1/cluster/show", read, 200, "the read key made on n3 reads every node")
    assert status_on(cluster, "GET", "/status.json", read) == [200] * 3
    assert status_on(cluster, "GET", "/metrics", read) == [200] * 3
    for node in cluster:
        assert http(node, "POST", "/api/v1/api-key/create", read)[0] == 403
        assert http(node, "POST", "/api/v1/set?allow_publish_during_netsplit=on", read)[0] == 403
    shown = n1.admin("api-key", "show", "--json", key=read)
    assert shown.returncode == 0, shown.stderr
    assert read not in shown.stdout and {r["Scope"] for r in json.loads(shown.stdout)} >= {"read", "admin"}
    # a read key cannot dump the keys' hashes (which would let it test guesses of a key chosen with `add`)
    dumped = n2.admin("metadata", "dump", "--json", key=read)
    assert dumped.returncode == 0, dumped.stderr
    assert "api_key" not in {row["Prefix"] for row in json.loads(dumped.stdout)}
    only_keys = n2.admin("metadata", "dump", "prefix=api_key", key=read)
    assert only_keys.returncode == 1 and "HTTP 400" in only_keys.stderr and "api-key show" in only_keys.stderr
    # a key that expires: refused on every node from then on
    past = n1.admin("api-key", "create", "scope=read", "expires=2020-01-01T00:00:00")
    assert past.returncode == 1 and "not in the future" in past.stderr and "HTTP 400" in past.stderr
    bad = n1.admin("api-key", "create", "expires=next-week")
    assert bad.returncode == 1 and "not a date-time" in bad.stderr
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 8))  # a margin for a slow create
    short_lived = created_key(n1, "scope=read", f"expires={soon}")
    wait_until(lambda: all(http(node, "GET", "/api/v1/cluster/show", short_lived)[0] == 401 and
                           "expired at" in http(node, "GET", "/api/v1/cluster/show", short_lived)[1]["error"]
                           for node in cluster), REPLICATION_DEADLINE + 8, interval=0.2,
               what="the key has expired on every node")
    listed = n2.admin("api-key", "show", "--json")
    assert any(r["Expires"].endswith("(expired)") for r in json.loads(listed.stdout)), listed.stdout


def test_keys_follow_deletes_restarts_and_a_node_that_joins_later(cluster: list[ClusterNode],
                                                                  tmp_path: Path) -> None:
    n1, n2, n3 = cluster
    admin = created_key(n2, "scope=mgmt")  # VerneMQ's name for the admin scope
    doomed = created_key(n1, "scope=status")
    wait_for_status(cluster, "GET", "/api/v1/api-key/show", admin, 200, "the admin key works everywhere")
    wait_for_status(cluster, "GET", "/status.json", doomed, 200, "the status key works everywhere")
    # deleted on n3 by the hash prefix `api-key show` gives: refused on every node
    rows = json.loads(n3.admin("api-key", "show", "--json").stdout)
    prefix = next(r["Hash"] for r in rows if r["Scope"] == "status")
    deleted = n3.admin("api-key", "delete", f"key={prefix}", key=admin)
    assert deleted.returncode == 0, deleted.stderr
    wait_for_status(cluster, "GET", "/status.json", doomed, 401, "the deleted key is refused everywhere")
    # a restarted node still knows the keys
    n2.stop()
    n2.start()
    assert http(n2, "GET", "/api/v1/cluster/show", admin)[0] == 200
    assert http(n2, "GET", "/status.json", doomed)[0] == 401
    # a node that joins afterwards learns them from the cluster
    n4 = ClusterNode(4, tmp_path)
    try:
        n4.start()
        assert http(n4, "GET", "/api/v1/cluster/show", admin)[0] == 401  # alone, it knows only its own key
        joined = n4.admin("cluster", "join", f"discovery-node={n1.discovery}")
        assert joined.returncode == 0, joined.stderr
        wait_for_status([n4], "GET", "/api/v1/cluster/show", admin, 200, "the joined node accepts the admin key")
        assert http(n4, "GET", "/status.json", doomed)[0] == 401
        # and each node's own bootstrap key stays its own
        assert http(n4, "GET", "/api/v1/cluster/show", n1.api_key())[0] == 401
    finally:
        n4.stop()


def test_vmq_admin_beside_its_node_needs_no_arguments(cluster: list[ClusterNode], tmp_path: Path) -> None:
    n1, n2, n3 = cluster
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    only_config = vmq_admin_beside(n2, "--config", str(n2.config_path), "cluster", "show", "--json", cwd=elsewhere)
    assert only_config.returncode == 0, only_config.stderr
    assert {r["Node"] for r in json.loads(only_config.stdout)} == {n.name for n in cluster}
    # in the directory of its vmqpy.conf (a default path), with nothing at all; the answer is n3's own
    nothing = vmq_admin_beside(n3, "api-key", "create", "scope=metrics", cwd=n3.config_path.parent)
    assert nothing.returncode == 0, nothing.stderr
    made_beside_n3 = nothing.stdout.strip()
    wait_for_status(cluster, "GET", "/metrics", made_beside_n3, 200, "the key made beside n3 scrapes every node")
    without = vmq_admin_beside(n1, "cluster", "show", cwd=elsewhere)  # no config anywhere: a clear refusal
    assert without.returncode != 0 and without.stderr


def test_keys_of_an_earlier_version_move_into_the_cluster_store(tmp_path: Path) -> None:
    """A data directory of an earlier version (per-node keys in DATA_DIR/api_keys): at start its keys are moved
    into the replicated store with scope admin, and the file is renamed."""
    node = ClusterNode(1, tmp_path)
    old_key = "a-key-made-by-an-earlier-version-0123456789"
    old = {"version": 1, "keys": [{"sha256": hashlib.sha256(old_key.encode()).hexdigest(), "created": 1.7e9,
                                   "node_key": False}]}
    (node.data_dir / "api_keys").write_text(json.dumps(old))
    try:
        node.start()
        assert http(node, "POST", "/api/v1/log/level?level=info", old_key)[0] == 200  # still all-powerful
        assert not (node.data_dir / "api_keys").exists() and (node.data_dir / "api_keys.migrated").exists()
        rows = json.loads(node.admin("api-key", "show", "--json").stdout)
        assert [(r["Scope"], r["Created"], r["Node key"]) for r in rows if not r["Node key"]] == [
            ("admin", "2023-11-14T22:13:20Z", False)]
    finally:
        node.stop()
