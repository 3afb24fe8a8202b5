"""bench/bench_paced.py: the in-process paced run delivers every message (it raises when one is missing) and
counts the node's Python calls."""

from __future__ import annotations

import cProfile
import pstats

import pytest

import vmqpy
from bench import bench_paced
from vmqpy import native


@pytest.mark.parametrize("qos", [0, 1])
async def test_a_paced_run_delivers_every_message_and_reports_cpu(qos: int) -> None:
    assert await bench_paced.run(200, qos, None) > 0


async def test_the_profiled_run_sees_the_node_s_delivery_path() -> None:
    profile = cProfile.Profile()
    await bench_paced.run(100, 1, profile)
    names = {name for (_file, _line, name) in pstats.Stats(profile).stats}  # type: ignore[attr-defined]
    # A compiled module's functions are not Python calls: the profile sees only those of the modules left pure.
    path = {"write_publish": "vmqpy.broker.driver.connection", "deliver": "vmqpy.broker.core.session",
            "on_puback": "vmqpy.broker.core.session", "next_packet": "vmqpy.mqtt.decoder"}
    seen = {name for name, module in path.items() if not (vmqpy.BUILD.compiled and module in native.COMPILED)}
    assert seen <= names
    assert "deliveries" in names  # the bench's own (never compiled): the profile ran


async def test_a_missing_delivery_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_paced.Pair, "frame", lambda self: b"\x30\x05\x00\x01z/x")  # to a topic nobody has
    with pytest.raises(RuntimeError, match="not delivered"):
        await bench_paced.run(20, 0, None)
