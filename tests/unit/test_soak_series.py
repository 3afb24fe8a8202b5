"""The soak test's arithmetic (tests/integration/soak/series.py): least-squares slopes, the window after warm-up,
the limits, and that the leaks the bounds are argued against fail them while level noisy series pass."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.integration.soak.series import BOUNDS, HOUR, Event, Sample, fit, plot, slopes, table

MiB = 1 << 20
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@pytest.mark.parametrize(("points", "slope"), [
    ([(0, 0), (1, 1)], 1.0),
    ([(0, 5), (1, 5), (2, 5)], 0.0),
    ([(0, 0), (1, 2), (2, 0), (3, 2)], 0.4),
    ([(0, 10), (2, 6), (4, 2)], -2.0),
])
def test_fit_table(points: list[tuple[float, float]], slope: float) -> None:
    assert fit(points) == pytest.approx(slope)


def test_fit_refuses_too_few_points() -> None:
    with pytest.raises(ValueError):
        fit([(1, 1)])
    with pytest.raises(ValueError):
        fit([(1, 1), (1, 2)])


@given(a=finite, b=finite, xs=st.lists(st.integers(0, 10_000), min_size=2, max_size=50, unique=True))
def test_fit_recovers_any_line(a: float, b: float, xs: list[int]) -> None:
    assert fit([(x, a * x + b) for x in xs]) == pytest.approx(a, rel=1e-6, abs=1e-6)


def series(seconds: float, step: float, rss: float, fds: float, data: float, noise: int = 0,
           seed: int = 1) -> list[Sample]:
    """One node's samples: RSS/fds/data growing by `rss` bytes, `fds`, `data` bytes per second, plus noise."""
    rng = random.Random(seed)
    out = []
    n = int(seconds / step)
    for i in range(n + 1):
        t = i * step
        out.append(Sample("n1", t, int(60 * MiB + rss * t + rng.randrange(-MiB, MiB) * noise),
                          int(28 + fds * t + rng.randrange(-2, 3) * noise),
                          int(4 * MiB + data * t + rng.randrange(-MiB // 4, MiB // 4) * noise), 0))
    return out


@pytest.mark.parametrize("seconds, step", [(120, 2), (3600, 5)])
def test_level_noisy_series_pass(seconds: float, step: float) -> None:
    found = slopes(series(seconds, step, 0, 0, 0, noise=1), since=0.4 * seconds)
    assert all(s.ok for s in found), table(found)


@pytest.mark.parametrize("seconds, step", [(120, 2), (3600, 5)])
def test_one_descriptor_per_reconnect_fails(seconds: float, step: float) -> None:
    """The soak connects more than 2 clients a second per node: a descriptor leaked by each is 7,200 an hour."""
    found = slopes(series(seconds, step, 0, 2.0, 0, noise=1), since=0.4 * seconds)
    assert [s.series for s in found if not s.ok] == ["descriptors"], table(found)


@pytest.mark.parametrize("seconds, step", [(3600, 5)])
def test_a_store_that_keeps_a_row_per_write_fails_the_hour(seconds: float, step: float) -> None:
    """100 bytes kept for each of ~40 metadata writes a second: 14 MiB an hour."""
    found = slopes(series(seconds, step, 0, 0, 4000, noise=1), since=0.4 * seconds)
    assert [s.series for s in found if not s.ok] == ["data_bytes"], table(found)


def test_memory_leak_per_message_fails_the_hour() -> None:
    """1 KiB kept per message at ~30 messages a second per node: ~105 MiB an hour."""
    found = slopes(series(3600, 5, 30 * 1024, 0, 0, noise=1), since=1440)
    assert [s.series for s in found if not s.ok] == ["rss_bytes"], table(found)


def test_limits_add_the_allowance_over_the_window() -> None:
    data = next(b for b in BOUNDS if b.series == "data_bytes")
    assert data.limit(HOUR) == pytest.approx(data.per_hour + data.allowance)
    assert data.limit(72) == pytest.approx(data.per_hour + data.allowance * 50)


def test_only_samples_after_warm_up_count() -> None:
    rising_then_level = [Sample("n1", t, 0, 10 if t >= 50 else t // 5, 0, 0) for t in range(0, 101)]
    found = {s.series: s for s in slopes(rising_then_level, since=50)}
    assert found["descriptors"].per_hour == 0 and found["descriptors"].samples == 51


def test_plot_writes_a_png(tmp_path: Path) -> None:
    samples = series(120, 2, 0, 0, 0, noise=1)
    plot(tmp_path / "soak.png", samples, [Event(18.0, "n2 restart")], 48.0, "a test")
    assert (tmp_path / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
