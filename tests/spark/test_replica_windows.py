"""Windows of under-replication from the queue_replicas lines (spark_analytics.replica_windows; pure: no Spark)."""

from __future__ import annotations

import pytest

from spark_analytics.replica_windows import StateLine, UnderWindow, summarize, windows_of

S = 1_000_000_000


def on(node: str, at: float, sessions: int = 1, messages: int = 0, writes: int = 0) -> StateLine:
    return StateLine(node, int(at * S), True, sessions, messages, writes)


def off(node: str, at: float, peaks: tuple[int, int, int] = (0, 0, 0)) -> StateLine:
    return StateLine(node, int(at * S), False, 0, 0, 0, *peaks)


@pytest.mark.parametrize(("lines", "last", "expected"), [
    ([], {}, []),
    # one window, its end logged with its peaks (the start's counts count too)
    ([on("a", 1, 2, 9), off("a", 3, (1, 5, 2))], {"a": 10 * S}, [UnderWindow("a", S, 3 * S, "logged", 2, 9, 2)]),
    # lines out of order in the input: sorted by time per node
    ([off("a", 3), on("a", 1)], {"a": 10 * S}, [UnderWindow("a", S, 3 * S, "logged", 1, 0, 0)]),
    # still open at the end of the node's log
    ([on("a", 8, 3)], {"a": 10 * S}, [UnderWindow("a", 8 * S, 10 * S, "open", 3, 0, 0)]),
    # a restart within a window: it ends where the next one starts
    ([on("a", 1), on("a", 4), off("a", 5)], {"a": 10 * S},
     [UnderWindow("a", S, 4 * S, "restart", 1, 0, 0), UnderWindow("a", 4 * S, 5 * S, "logged", 1, 0, 0)]),
    # an end without a start is ignored; nodes apart, ordered by start
    ([off("b", 1), on("b", 2), off("b", 4), on("a", 3), off("a", 3.5)], {"a": 9 * S, "b": 9 * S},
     [UnderWindow("b", 2 * S, 4 * S, "logged", 1, 0, 0), UnderWindow("a", 3 * S, int(3.5 * S), "logged", 1, 0, 0)]),
])
def test_windows_of(lines: list[StateLine], last: dict[str, int], expected: list[UnderWindow]) -> None:
    assert windows_of(lines, last) == expected


def test_summary_of_no_line_says_nothing_was_recorded() -> None:
    assert summarize(0, [])["recorded"] is False
    figures = summarize(2, windows_of([on("a", 1, 2, 9, 1), off("a", 3)], {"a": 5 * S}))
    assert (figures["windows"], figures["total_s"], figures["longest_s"], figures["peak_writes"]) == (1, 2.0, 2.0, 1)
