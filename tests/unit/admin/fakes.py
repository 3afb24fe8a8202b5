"""`FakeNode`: an in-memory AdminNode for the admin tests (the lead's integration tests use a real node)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from admin import session_table
from admin.command import Context, execute
from admin.commands import parse_command
from admin.errors import CommandError

Row = dict[str, Any]

_BOOL_TEXT = {"on": "on", "true": "on", "yes": "on", "1": "on", "off": "off", "false": "off", "no": "off", "0": "off"}


def topic_matches(topic_filter: str, topic: str) -> bool:
    f_levels, t_levels = topic_filter.split("/"), topic.split("/")
    for i, level in enumerate(f_levels):
        if level == "#":
            return True
        if i >= len(t_levels) or (level != "+" and level != t_levels[i]):
            return False
    return len(f_levels) == len(t_levels)


class FakeNode:
    """Rows and settings held in plain attributes; every call is recorded in `calls`."""

    def __init__(self, name: str = "vmq1@127.0.0.1") -> None:
        self.name = name
        self.members: list[Row] = [{"Node": name, "Running": True, "Reachable": True, "Ready": True}]
        self.sessions: list[Row] = []
        self.listeners: list[Row] = [{"type": "mqtt", "status": "running", "ip": "127.0.0.1", "port": 1883,
                                      "mountpoint": "", "max_conns": "infinity", "name": "default",
                                      "active_conns": 0}]
        self.session_note: str | None = None
        self.subscriptions: list[Row] = []
        self.retained: list[Row] = []
        self.metric_values: dict[str, int | float] = {}
        self.metadata: list[Row] = []
        self.settings: dict[str, str] = {"allow_publish_during_netsplit": "off", "max_inflight_messages": "20"}
        self.ready: tuple[bool, str] = (True, "serving clients")
        self.unreachable: set[str] = set()
        self.join_delay = 0.0
        self.calls: list[tuple[Any, ...]] = []
        self.api_keys: dict[str, Row] = {}  # digest -> record (admin.keys)
        self.acl_error: str | None = None  # what `acl_reload` refuses with (None: it succeeds)

    def last_call(self) -> tuple[Any, ...]:
        return self.calls[-1]

    def node_name(self) -> str:
        return self.name

    # the cluster's API keys: a dict stands for the replicated store (one store shared by FakeNodes = one cluster)
    def api_key_get(self, digest: str) -> Row | None:
        record = self.api_keys.get(digest)
        return None if record is None else dict(record)

    def api_key_fold(self) -> list[tuple[str, Row]]:
        return [(d, dict(r)) for d, r in self.api_keys.items()]

    def api_key_put(self, digest: str, record: Row) -> None:
        self.calls.append(("api_key_put", digest))
        self.api_keys[digest] = dict(record)

    def api_key_delete(self, digest: str) -> None:
        self.calls.append(("api_key_delete", digest))
        self.api_keys.pop(digest, None)

    def cluster_show(self) -> list[Row]:
        return [dict(r) for r in self.members]

    async def cluster_join(self, discovery_node: str) -> str:
        self.calls.append(("cluster_join", discovery_node))
        if self.join_delay:
            await asyncio.sleep(self.join_delay)
        if discovery_node in self.unreachable:
            raise CommandError(f"discovery node {discovery_node} is not reachable", 503)
        if any(r["Node"] == discovery_node for r in self.members):
            raise CommandError(f"{discovery_node} is already a member", 409)
        self.members.append({"Node": discovery_node, "Running": True, "Reachable": True, "Ready": True})
        return "Done"

    async def cluster_leave(self, node: str, kill_sessions: bool, interval: float, timeout: float) -> str:
        self.calls.append(("cluster_leave", node, kill_sessions, interval, timeout))
        if not any(r["Node"] == node for r in self.members):
            raise CommandError(f"{node} is not a cluster member", 404)
        self.members = [r for r in self.members if r["Node"] != node]
        return f"{node} left the cluster"

    def health(self) -> tuple[bool, str]:
        return self.ready

    async def node_drain(self, rate: float, timeout: float) -> str:
        self.calls.append(("node_drain", rate, timeout))
        self.ready = (False, "draining")
        return f"{self.name} drained: disconnected 0 clients; 0 connections left"

    def node_stop(self) -> str:
        self.calls.append(("node_stop",))
        return f"{self.name} is stopping"

    async def session_show(
        self, filters: list[tuple[str, str, str]], per_subscription: bool, limit: int, per_message: bool = False
    ) -> tuple[list[Row], str | None]:
        self.calls.append(("session_show", filters, per_subscription, limit))
        rows = session_table.select(self.sessions, filters, per_subscription, limit, per_message)
        return rows, self.session_note

    async def session_unsubscribe(self, client_id: str, topic_filter: str) -> str:
        self.calls.append(("session_unsubscribe", client_id, topic_filter))
        for row in self.sessions:
            subscriptions = row.get("subscriptions", [])
            if row["client_id"] == client_id and any(s[0] == topic_filter for s in subscriptions):
                row["subscriptions"] = [s for s in subscriptions if s[0] != topic_filter]
                return f"Done\n{client_id} on {row['node']}: unsubscribed from {topic_filter}"
        raise CommandError(f"{client_id!r} has no subscription {topic_filter!r}", 404)

    async def session_disconnect(self, client_id: str, cleanup: bool) -> str:
        self.calls.append(("session_disconnect", client_id, cleanup))
        if not any(r["client_id"] == client_id for r in self.sessions):
            raise CommandError(f"no session of client id {client_id!r} in the cluster", 404)
        if cleanup:
            self.sessions = [r for r in self.sessions if r["client_id"] != client_id]
        return f"{client_id}: disconnected" + (", session removed" if cleanup else "")

    async def status(self) -> tuple[list[Row], str | None]:
        self.calls.append(("status",))
        ready, reason = self.ready
        up = [r["Node"] for r in self.members if r["Node"] not in self.unreachable]
        rows = [{"node": node, "ready": ready, "reason": reason} for node in up]
        return rows, self.session_note

    def overview(self) -> Row:
        self.calls.append(("overview",))
        ready, reason = self.ready
        return {"node": self.node_name(), "time": 0.0, "members": self.cluster_show(), "version": "0.0-fake",
                "state": "ready" if ready else "not ready", "reason": reason,
                "serves": ["register", "publish", "subscribe", "unsubscribe"] if ready else [],
                "groups": [[r["Node"] for r in self.members]], "policy": {"readiness": "all", "serving": True},
                "events": []}

    def acl_reload(self) -> str:
        self.calls.append(("acl_reload",))
        if self.acl_error is not None:
            raise CommandError(self.acl_error, 400)
        return "ACL /etc/vmq.acl reloaded (3 rules)"

    def retain_delete_expired(self) -> int:
        self.calls.append(("retain_delete_expired",))
        expired = [r for r in self.retained if r.get("expired")]
        self.retained = [r for r in self.retained if not r.get("expired")]
        return len(expired)

    def retain_delete(self, topic: str) -> str:
        self.calls.append(("retain_delete", topic))
        if not any(r["topic"] == topic for r in self.retained):
            raise CommandError(f"no retained message on {topic!r}", 404)
        self.retained = [r for r in self.retained if r["topic"] != topic]
        return f"deleted the retained message of {topic}"

    def subscription_show(self, client_id: str | None, limit: int) -> list[Row]:
        self.calls.append(("subscription_show", client_id, limit))
        rows = [r for r in self.subscriptions if client_id is None or r["client_id"] == client_id]
        return rows[:limit]

    def retain_show(self, topic_filter: str | None, limit: int) -> list[Row]:
        self.calls.append(("retain_show", topic_filter, limit))
        rows = [r for r in self.retained if topic_filter is None or topic_matches(topic_filter, r["topic"])]
        return rows[:limit]

    def listener_show(self) -> list[Row]:
        return [dict(row) for row in self.listeners]

    def listener_stop(self, address: str, port: int, kill_sessions: bool) -> str:
        self.calls.append(("listener_stop", address, port, kill_sessions))
        for row in self.listeners:
            if (row["ip"], row["port"]) == (address, port):
                row["status"] = "stopped"
                return "stopped"
        raise CommandError(f"no MQTT listener at {address}:{port}", 404)

    async def listener_start(self, address: str, port: int) -> str:
        self.calls.append(("listener_start", address, port))
        for row in self.listeners:
            if (row["ip"], row["port"]) == (address, port):
                row["status"] = "running"
                return "started"
        raise CommandError(f"no MQTT listener at {address}:{port}", 404)

    async def session_reauthorize(self, client_id: str, username: str) -> str:
        self.calls.append(("session_reauthorize", client_id, username))
        return "Unchanged"

    async def trace_client(
        self, client_id: str, *, rate_max: int, rate_interval: float, payload_limit: int, stop_after: float
    ) -> AsyncIterator[str]:
        self.calls.append(("trace_client", client_id, rate_max, rate_interval, payload_limit, stop_after))
        for i in range(3):
            yield f"line {i} of {client_id}"
            await asyncio.sleep(0)

    def metrics(self) -> dict[str, int | float]:
        return dict(self.metric_values)

    def build_info(self) -> dict[str, str]:
        return {"version": "0.1.0", "core": "pure"}

    def metadata_dump(self, prefix: str | None) -> list[Row]:
        self.calls.append(("metadata_dump", prefix))
        return [r for r in self.metadata if prefix is None or r["prefix"].startswith(prefix)]

    def get_setting(self, key: str) -> str:
        if key not in self.settings:
            raise CommandError(f"unknown setting '{key}'", 404)
        return self.settings[key]

    def setting_rows(self) -> list[Row]:
        return [{"Setting": k, "Value": v, "Run time": "at once"} for k, v in sorted(self.settings.items())]

    async def set_settings_on(self, pairs: list[tuple[str, str]], node: str | None) -> str:
        self.calls.append(("set_settings_on", pairs, node))
        if node is not None and node != self.name:
            raise CommandError(f"no member {node!r} answered", 404)
        return "\n".join(f"{self.name}: {key} = {self.set_setting(key, value)}" for key, value in pairs)

    def set_setting(self, key: str, value: str) -> str:
        self.calls.append(("set_setting", key, value))
        current = self.get_setting(key)
        if current in ("on", "off"):
            if value.lower() not in _BOOL_TEXT:
                raise CommandError(f"bad value for {key}: expected on or off, got {value!r}", 400)
            value = _BOOL_TEXT[value.lower()]
        elif not value.isdigit():
            raise CommandError(f"bad value for {key}: expected a whole number, got {value!r}", 400)
        self.settings[key] = value
        return value


async def run(ctx: Context, line: str) -> Any:
    """The command `line` (its words split at spaces) executed by its handler, without HTTP."""
    cmd, args = parse_command(line.split())
    return await execute(cmd, args, ctx)
