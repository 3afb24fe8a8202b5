"""bench/bench_paced.py: the in-process paced run delivers every message (it raises when one is missing) and
counts the node's Python calls."""

from __future__ import annotations

import cProfile
import pstats

import pytest

from bench import bench_paced


@pytest.mark.parametrize("qos", [0, 1])
async def test_a_paced_run_delivers_every_message_and_reports_cpu(qos: int) -> None:
    assert await bench_paced.run(200, qos, None) > 0


async def test_the_profiled_run_sees_the_node_s_delivery_path() -> None:
    profile = cProfile.Profile()
    await bench_paced.run(100, 1, profile)
    names = {name for (_file, _line, name) in pstats.Stats(profile).stats}  # type: ignore[attr-defined]
    assert {"write_publish", "deliver", "on_puback", "next_packet"} <= names


async def test_a_missing_delivery_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_paced.Pair, "frame", lambda self: b"\x30\x05\x00\x01z/x")  # to a topic nobody has
    with pytest.raises(RuntimeError, match="not delivered"):
        await bench_paced.run(20, 0, None)
