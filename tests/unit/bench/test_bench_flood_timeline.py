"""bench.flood_timeline: attacker events binned on the monotonic clock, and each slow probe round trip matched
with the events around it (tables, and a hypothesis property: nothing counted is lost by the JSON round trip)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.flood_timeline import BIN, BURST, KINDS, LOOK_BACK, EventBins, causes, explain


def bins_with(events: list[tuple[str, float]]) -> EventBins:
    bins = EventBins()
    for kind, at in events:
        bins.record(kind, at)
    return bins


def test_an_unknown_event_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown attacker event 'reset'"):
        EventBins().record("reset", 1.0)
    with pytest.raises(ValueError, match="unknown attacker event 'x'"):
        EventBins.from_json({"x": [[1, 1]]})


@given(st.lists(st.tuples(st.sampled_from(KINDS), st.floats(0, 1e5)), max_size=200))
def test_the_json_form_keeps_every_event(events: list[tuple[str, float]]) -> None:
    bins = bins_with(events)
    again = EventBins.from_json(bins.to_json())
    assert again.counts == bins.counts
    for kind in KINDS:
        assert again.between(kind, 0.0, 1e5) == sum(1 for k, _ in events if k == kind)


@pytest.mark.parametrize(("events", "sample", "cause"), [
    # a burst of closes just before the sample started: named
    ([("close", 100.0 - LOOK_BACK / 2)] * BURST, (100.0, 0.004), "close"),
    # the same burst well before the sample: not its cause
    ([("close", 100.0 - 10 * LOOK_BACK)] * BURST, (100.0, 0.004), "quiet"),
    # opens during the round trip outnumber the bytes written
    ([("open", 100.002)] * (BURST + 5) + [("write", 100.001)] * BURST, (100.0, 0.004), "open"),
    # fewer than BURST events: quiet
    ([("write", 100.001)] * (BURST - 1), (100.0, 0.004), "quiet"),
])
def test_a_slow_sample_is_matched_with_the_burst_around_it(events: list[tuple[str, float]],
                                                           sample: tuple[float, float], cause: str) -> None:
    slow = explain([sample, (200.0, 0.0005)], bins_with(events), threshold=0.002, origin=90.0)
    assert len(slow) == 1  # the fast sample is left out
    assert slow[0].cause == cause
    assert slow[0].at == pytest.approx(10.0)
    assert causes(slow) == {cause: 1}


def test_events_are_counted_by_the_bins_that_overlap_the_span() -> None:
    bins = bins_with([("write", 5 * BIN + BIN / 2), ("write", 7 * BIN + BIN / 2), ("write", 9 * BIN + BIN / 2)])
    assert bins.between("write", 5 * BIN, 7 * BIN + BIN / 4) == 2
    assert bins.between("close", 0.0, 100.0) == 0
