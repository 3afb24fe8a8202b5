"""membership.py's files: the incarnation and the left marker (a removed node must stay out across restarts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmqpy.cluster.membership import LeftState, load_incarnation, next_incarnation, save_incarnation


def test_left_state_round_trips_and_clears(tmp_path: Path) -> None:
    assert LeftState.load(tmp_path) is None
    state = LeftState(1234, "n1@127.0.0.11", 1_700_000_000.5)
    state.save(tmp_path)
    assert LeftState.load(tmp_path) == state
    LeftState.clear(tmp_path)
    assert LeftState.load(tmp_path) is None
    LeftState.clear(tmp_path)  # clearing twice is fine


@pytest.mark.parametrize("damage", ["", "{", "[]", '{"incarnation": "x", "by": "n", "at": 0}', '{"by": "n"}'])
def test_a_damaged_left_marker_counts_as_left(tmp_path: Path, damage: str) -> None:
    save_incarnation(tmp_path, 77)
    (tmp_path / "left").write_text(damage)
    state = LeftState.load(tmp_path)
    assert state is not None and state.incarnation == 77 and "damaged" in state.by


@pytest.mark.parametrize("previous", [0, 1, 10**15])
def test_a_new_incarnation_is_above_the_previous_one(previous: int) -> None:
    assert next_incarnation(previous) > previous


def test_save_incarnation_is_read_back(tmp_path: Path) -> None:
    save_incarnation(tmp_path, 42)
    assert load_incarnation(tmp_path) == 42
    assert not (tmp_path / "incarnation.tmp").exists()
