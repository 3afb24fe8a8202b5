"""vmqpy.gc_watch: every pass of the collector is counted and timed, a long one is kept for the tick to log
(a table, a property, and the real collector)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admin.prometheus import families
from tests.unit.clocks import Clock
from vmqpy.gc_watch import KEEP, THRESHOLDS, GcWatch, Pause


def run(watch: GcWatch, clock: Clock, generation: int, seconds: float, collected: int = 0) -> None:
    watch.callback("start", {"generation": generation, "collected": 0, "uncollectable": 0})
    clock.now += seconds
    watch.callback("stop", {"generation": generation, "collected": collected, "uncollectable": 0})


@pytest.mark.parametrize(("passes", "long"), [
    ([(0, 0.001), (1, 0.01)], []),
    ([(2, 0.6, 12)], [Pause(2, 0.6, 12)]),
    ([(0, 0.001), (2, 0.25, 3), (2, 0.2499)], [Pause(2, 0.25, 3)]),  # at warn_after exactly: long
    ([(1, 0.3), (2, 1.5, 7)], [Pause(1, 0.3, 0), Pause(2, 1.5, 7)]),
])
def test_passes_are_counted_timed_and_the_long_ones_kept(passes: list[tuple[float, ...]], long: list[Pause]) -> None:
    clock = Clock()
    watch = GcWatch(warn_after=0.25, clock=clock)
    for gen, seconds, *collected in passes:
        run(watch, clock, int(gen), seconds, int(collected[0]) if collected else 0)
    assert watch.take() == [Pause(p.generation, pytest.approx(p.seconds), p.collected) for p in long]  # type: ignore[arg-type]
    assert watch.take() == []  # taken once
    for gen in range(3):
        assert watch.collections[gen] == sum(1 for p in passes if p[0] == gen)
        assert watch.seconds[gen] == pytest.approx(sum(p[1] for p in passes if p[0] == gen))
    assert watch.longest == pytest.approx(max(p[1] for p in passes))


def test_a_stop_without_its_start_or_an_unknown_generation_is_ignored() -> None:
    clock = Clock()
    watch = GcWatch(clock=clock)
    watch.callback("stop", {"generation": 2, "collected": 1})
    watch.callback("start", {"generation": 7})
    clock.now = 5.0
    watch.callback("stop", {"generation": 7, "collected": 1})
    assert watch.collections == [0, 0, 0] and watch.take() == []


def test_only_the_last_long_passes_are_kept_but_all_are_counted() -> None:
    clock = Clock()
    watch = GcWatch(warn_after=0.1, clock=clock)
    for _ in range(KEEP + 10):
        run(watch, clock, 2, 0.5)
    assert len(watch.take()) == KEEP
    assert watch.collections[2] == KEEP + 10


@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 3.0)), max_size=40))
def test_totals_add_up_and_long_means_at_least_warn_after(passes: list[tuple[int, float]]) -> None:
    clock = Clock()
    watch = GcWatch(warn_after=0.25, clock=clock)
    for gen, seconds in passes:
        run(watch, clock, gen, seconds)
    assert sum(watch.collections) == len(passes)
    assert sum(watch.seconds) == pytest.approx(sum(s for _, s in passes))
    kept = watch.take()
    assert len(kept) == min(KEEP, sum(1 for _, s in passes if s >= 0.25))
    assert all(p.seconds >= 0.25 for p in kept)


@pytest.mark.parametrize(("warn_after", "freeze_after"), [(0.0, 0.05), (-1.0, 0.05), (0.25, 0.0)])
def test_bad_settings_are_usage_errors(warn_after: float, freeze_after: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        GcWatch(warn_after, freeze_after=freeze_after)


@pytest.mark.parametrize(("passes", "due"), [
    ([(0, 0.5), (1, 0.9)], False),  # young passes, however slow, do not freeze
    ([(2, 0.049)], False),
    ([(2, 0.05)], True),
    ([(2, 3.0), (0, 0.001)], True),
])
def test_a_slow_full_pass_makes_a_freeze_due(passes: list[tuple[int, float]], due: bool) -> None:
    clock = Clock()
    watch = GcWatch(clock=clock, freeze_after=0.05)
    for gen, seconds in passes:
        run(watch, clock, gen, seconds)
    assert watch.freeze_due is due


@pytest.fixture
def tuned_collector() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)


def test_a_due_freeze_moves_what_is_alive_out_of_sight_and_resets_the_old_count(tuned_collector: None) -> None:
    clock = Clock()
    watch = GcWatch(clock=clock)
    kept = [[i] for i in range(10_000)]  # tracked objects alive at the freeze
    assert watch.freeze_if_due() is False  # nothing due
    run(watch, clock, 2, 0.2)
    frozen_before = gc.get_freeze_count()
    assert watch.freeze_if_due() is True
    assert gc.get_freeze_count() >= frozen_before + len(kept)
    assert watch.freeze_due is False and watch.freezes == 1
    assert watch.counters()["gc_freezes"] == 1
    assert not any(kept[0] is o for o in gc.get_objects(2))  # the next full pass does not walk it
    assert watch.freeze_if_due() is False  # once per slow pass


def test_no_freeze_in_a_process_whose_collector_the_node_did_not_tune() -> None:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's own
    try:
        clock = Clock()
        watch = GcWatch(clock=clock)
        run(watch, clock, 2, 1.0)
        frozen = gc.get_freeze_count()
        assert watch.freeze_if_due() is False
        assert gc.get_freeze_count() == frozen and watch.freeze_due is False
    finally:
        gc.set_threshold(*saved)


def test_installed_it_sees_the_real_collector_and_uninstalled_it_does_not() -> None:
    watch = GcWatch()
    watch.install()
    watch.install()  # once only
    try:
        assert gc.callbacks.count(watch.callback) == 1
        gc.collect(0)
        gc.collect()
        assert watch.collections[0] >= 1 and watch.collections[2] >= 1
        assert all(s >= 0 for s in watch.seconds)
    finally:
        watch.uninstall()
    seen = list(watch.collections)
    gc.collect()
    assert watch.collections == seen and watch.callback not in gc.callbacks


def test_the_totals_are_exported_per_generation() -> None:
    clock = Clock()
    watch = GcWatch(clock=clock)
    run(watch, clock, 2, 0.75)
    raw = {f"process.{k}": v for k, v in watch.counters().items()}
    exported = {f.name: f for f in families(raw)}
    seconds = dict(exported["vmqpy_gc_seconds"].samples)
    collections = dict(exported["vmqpy_gc_collections"].samples)
    assert seconds[(("generation", "2"),)] == pytest.approx(0.75)
    assert collections[(("generation", "2"),)] == 1 and collections[(("generation", "0"),)] == 0
