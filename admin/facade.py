"""`AdminNode`: the narrow view of a node that the administration commands need.

The node implements it; the administration layer never imports the broker, cluster, metadata or node modules.
Any method may raise `admin.errors.CommandError(message, status)` with a message naming the cause (400 bad
argument, 404 unknown thing, 409 conflict, 503 not possible right now); any other exception becomes a 500
answer naming the exception.

The methods that are not `async` are called on the node's event loop (the one that serves the HTTP API) and
must not block. `cluster_join` and `cluster_leave` may wait on the network and are awaited.

Rows are plain dicts of JSON-friendly values (str, int, float, bool, None, and lists/dicts of those). Column
order in the CLI's table follows the order of the keys in the first row where they appear.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

Row = dict[str, Any]


class ApiKeyRecords(Protocol):
    """The cluster's API keys in the replicated metadata store (`admin.keys`): one record per key, under the key's
    SHA-256 (hex). A put or delete reaches every member; a node that cannot write to the cluster's store now (it
    left its cluster) -> CommandError 409."""

    def node_name(self) -> str:
        """This node's name, NAME@HOST."""
        ...

    def api_key_get(self, digest: str) -> Row | None:
        """The record stored under `digest`, or None."""
        ...

    def api_key_fold(self) -> list[tuple[str, Row]]:
        """(digest, record) of every stored key."""
        ...

    def api_key_put(self, digest: str, record: Row) -> None:
        """Store `record` under `digest` for the whole cluster."""
        ...

    def api_key_delete(self, digest: str) -> None:
        """Delete the record under `digest` on every member."""
        ...


@runtime_checkable
class AdminNode(ApiKeyRecords, Protocol):
    def node_name(self) -> str:
        """This node's name, NAME@HOST."""
        ...

    def cluster_show(self) -> list[Row]:
        """One row per known cluster member: keys Node (str), Running, Reachable, Ready (bool), plus any extra
        columns the node wants to show."""
        ...

    async def cluster_join(self, discovery_node: str) -> str:
        """Join the cluster that `discovery_node` (NAME@HOST[:PORT], already syntax-checked) belongs to.
        Returns a line for the operator ("Done", or what happened)."""
        ...

    async def cluster_leave(self, node: str, kill_sessions: bool, interval: float, timeout: float) -> str:
        """Make `node` (NAME@HOST[:PORT]) leave the cluster. `kill_sessions`: disconnect its clients instead of
        waiting for them to move; `interval`: seconds between checks of its remaining sessions; `timeout`:
        seconds to wait in total before giving up (raise CommandError 503 or 409 naming what is left)."""
        ...

    async def node_drain(self, rate: float, timeout: float) -> str:
        """Drain this node: refuse new MQTT connections, answer 503 on /health, disconnect the clients at most
        `rate` per second; return a line naming how many were disconnected once none is left. Clients left after
        `timeout` seconds -> CommandError 503 naming the counts; bad rate or timeout -> 400."""
        ...

    def node_stop(self) -> str:
        """Stop this node as SIGTERM does, after the answer is sent; a line for the operator. A node that cannot
        be stopped this way -> CommandError 409."""
        ...

    def health(self) -> tuple[bool, str]:
        """(ready, reason): whether the node serves clients and takes part in the cluster; the reason says why
        not (or what is fine) in a few words."""
        ...

    async def session_show(
        self, filters: list[tuple[str, str, str]], per_subscription: bool, limit: int, per_message: bool = False
    ) -> tuple[list[Row], str | None]:
        """The sessions of every member, as full rows of `admin.session_table` (filtered with its `select`, at
        most `limit` per node; a row per subscription / queued message when asked), and a note naming the members
        that did not answer (None when all did)."""
        ...

    async def session_unsubscribe(self, client_id: str, topic_filter: str) -> str:
        """Remove the subscription `topic_filter` of `client_id`'s session wherever it is, as the client's own
        UNSUBSCRIBE would; "Done" and a line per node. No such session or subscription -> CommandError 404."""
        ...

    async def session_disconnect(self, client_id: str, cleanup: bool) -> str:
        """Disconnect `client_id` wherever it is connected (with `cleanup`, end its session too); a line for the
        operator. No such client anywhere -> CommandError 404."""
        ...

    def listener_show(self) -> list[Row]:
        """Every MQTT listener of this node, running or stopped (type, status, ip, port, mountpoint, max_conns,
        name, active_conns)."""
        ...

    def listener_stop(self, address: str, port: int, kill_sessions: bool) -> str:
        """Stop the listener at address:port (404: none there); with `kill_sessions` close its connections."""
        ...

    async def listener_start(self, address: str, port: int) -> str:
        """Listen again on a stopped listener (404: none there; 409: the node drains or left)."""
        ...

    async def session_reauthorize(self, client_id: str, username: str) -> str:
        """Check the subscriptions of `client_id`'s session, wherever it is, against the ACL for `username` and
        remove those it does not allow; "Unchanged" or "Done" first, then a line per node. No such client
        anywhere -> CommandError 404."""
        ...

    async def status(self) -> tuple[list[Row], str | None]:
        """One row per member that answered (node, ready, reason, state, serves, version, connections, sessions
        online and offline, subscriptions, retained, queued, publishes received and dropped, the members it
        counts), and a note naming the members that did not answer (None when all did). `state` is the member's
        as its /health sees it (ready, not ready, joining, draining, leaving, left), `serves` the client
        operations (register, publish, subscribe, unsubscribe) it serves now, `version` its vmqpy version.
        Served as /status.json (admin.status_page.document)."""
        ...

    def acl_reload(self) -> str:
        """Read this node's ACL and password files again now; a line per file for the operator. A file that
        cannot be used (the rules in force stay) -> CommandError 400 naming the file and line."""
        ...

    def overview(self) -> Row:
        """This node's own view for the status page: node (its name), time (unix seconds), version, state, reason
        and serves (as in its `status` row, but current), members (rows as `cluster_show`), groups (the groups of
        members it sees reach each other, one group when not split), policy (readiness, the allow_* flags,
        trade_consistency, serving, reason, the members it does not reach) and events (the recent cluster
        events, oldest first: at, kind, detail)."""
        ...

    def retain_delete_expired(self) -> int:
        """Delete, cluster-wide, the retained messages whose message expiry interval passed; how many."""
        ...

    def retain_delete(self, topic: str) -> str:
        """Delete the retained message of `topic` cluster-wide; a line for the operator. None -> CommandError 404."""
        ...

    def subscription_show(self, client_id: str | None, limit: int) -> list[Row]:
        """Subscriptions (all, or those of `client_id`), at most `limit` rows."""
        ...

    def retain_show(self, topic_filter: str | None, limit: int) -> list[Row]:
        """Retained messages (all, or those whose topic matches the MQTT `topic_filter`), at most `limit`."""
        ...

    def trace_client(
        self, client_id: str, *, rate_max: int, rate_interval: float, payload_limit: int, stop_after: float
    ) -> AsyncIterator[str]:
        """`trace client`: the lines of a trace of `client_id`'s packets on this node, as they come, until the
        trace ends; closing the iterator stops the trace."""
        ...

    def metrics(self) -> dict[str, int | float]:
        """Metric name -> current value."""
        ...

    def build_info(self) -> dict[str, str]:
        """The version and which build of the core runs: {"version": ..., "core": "compiled" or "pure"}."""
        ...

    def metadata_dump(self, prefix: str | None) -> list[Row]:
        """The replicated metadata this node holds (all, or the keys under `prefix`), one row per key, in a stable
        order so that dumps of two nodes can be compared for convergence."""
        ...

    def get_setting(self, key: str) -> str:
        """The current value of a run-time setting, as text; unknown key -> CommandError(..., 404)."""
        ...

    def setting_rows(self) -> list[Row]:
        """Every setting: Setting (its key), Value (as `get_setting`), Run time (when a change takes effect, or
        "no: " and why it cannot change while the node runs)."""
        ...

    async def set_settings_on(self, pairs: list[tuple[str, str]], node: str | None) -> str:
        """`set KEY=VALUE ... --all` (node None: every member) or `--node=NAME`: a line `NODE: KEY = VALUE` per
        member and key. Every pair is checked first (404, 409 with why, 400); a member that did not change ->
        CommandError 503 naming it; no member NAME -> 404."""
        ...

    def set_setting(self, key: str, value: str) -> str:
        """Change a run-time setting; returns the value now in force, as text (normalised, e.g. "on").
        Unknown key -> CommandError(..., 404); bad value -> CommandError(..., 400)."""
        ...
