"""The rows of `vmq-admin session show` (admin/session_table.py): filters, per-subscription rows, projection."""

from __future__ import annotations

from typing import Any

import pytest

from admin import session_table as st

ROWS: list[dict[str, Any]] = [
    {"client_id": "a", "is_online": True, "node": "n1", "peer_port": 5, "user": None, "subscriptions": [["x/#", 1]]},
    {"client_id": "b", "is_online": False, "node": "n2", "peer_port": None, "user": "bob", "subscriptions": []},
    {"client_id": "c", "is_online": True, "node": "n2", "peer_port": 7, "user": "eve",
     "subscriptions": [["y", 0], ["z/+", 2]]},
]  # fmt: skip


@pytest.mark.parametrize(
    ("filters", "per_subscription", "limit", "clients"),
    [
        ({}, False, 10, ["a", "b", "c"]),
        ({"is_online": "true"}, False, 10, ["a", "c"]),
        ({"is_online": "false"}, False, 10, ["b"]),
        ({"user": "bob"}, False, 10, ["b"]),
        ({"user": ""}, False, 10, ["a"]),  # no user name
        ({"node": "n2", "is_online": "true"}, False, 10, ["c"]),
        ({}, False, 2, ["a", "b"]),
        ({}, True, 10, ["a", "c", "c"]),  # b has no subscription: no row
        ({"qos": "2"}, True, 10, ["c"]),
        ({"topic": "x/#"}, True, 10, ["a"]),
        ({"peer_port": "7"}, False, 10, ["c"]),
    ],
)
def test_select(filters: dict[str, str], per_subscription: bool, limit: int, clients: list[str]) -> None:
    assert [r["client_id"] for r in st.select(ROWS, filters, per_subscription, limit)] == clients


@pytest.mark.parametrize(
    ("column", "text", "expected"),
    [("is_online", "on", "true"), ("is_online", "FALSE", "false"), ("qos", "01", "1"), ("user", "On", "On")],
)
def test_normalise_filter(column: str, text: str, expected: str) -> None:
    assert st.normalise_filter(column, text) == expected


@pytest.mark.parametrize(("column", "text"), [("is_online", "maybe"), ("peer_port", "-1"), ("qos", "x")])
def test_normalise_filter_refuses(column: str, text: str) -> None:
    with pytest.raises(ValueError, match=column):
        st.normalise_filter(column, text)


def test_project_and_order() -> None:
    unordered = [{"client_id": "b", "node": "n1"}, {"client_id": "a", "node": "n2"}, {"client_id": "a", "node": "n1"}]
    rows = st.order(unordered)
    assert st.project(rows, ["node", "client_id"]) == [
        {"node": "n1", "client_id": "a"}, {"node": "n2", "client_id": "a"}, {"node": "n1", "client_id": "b"},
    ]  # fmt: skip
    assert list(st.project(rows, ["user"])[0]) == ["user"]  # a column a row lacks is shown empty
