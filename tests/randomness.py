"""Where the suite's random choices come from: one switch, `TEST_PROFILE`.

- `ci` (the default; `make test`): derandomized. Hypothesis draws the same examples on every machine (its seed is
  derived from each test's name, and no example database is read or written), and every seeded test (simulations,
  randomized integration tests) runs its fixed seed. `make test` on a fresh clone is then a reproducible gate: what
  passes here passes on the next clone, and a failure fails again on a re-run.
- `long` (`make test-long`): randomized, with more examples per property. Hypothesis chooses a new seed each run,
  saves the failing examples in `.hypothesis/` (replayed first on the next run) and prints a `@reproduce_failure`
  line; seeded tests draw a fresh seed and print it.

A seeded test replays any seed with its own environment variable (named in its message), whatever the profile.
"""

from __future__ import annotations

import os
import random

from hypothesis import HealthCheck, settings

# Not a VMQPY_* name: every VMQPY_* variable is a setting of the nodes the tests start (docs/configuration.md).
PROFILE = os.environ.get("TEST_PROFILE", "ci")
PROFILES = ("ci", "long")
if PROFILE not in PROFILES:
    raise RuntimeError(f"TEST_PROFILE={PROFILE!r}: expected one of {', '.join(PROFILES)}")

# The machine the suite runs on is shared and noisy: a property's examples are counted, never timed.
_UNTIMED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", _UNTIMED, derandomize=True, database=None, print_blob=True)
# Properties that set their own `max_examples` keep it; the others draw 500 examples instead of 100.
settings.register_profile("long", _UNTIMED, max_examples=500, print_blob=True)


def load() -> None:
    """Make the chosen profile hypothesis's default (called once, from tests/conftest.py)."""
    settings.load_profile(PROFILE)


def seed(variable: str, fixed: int) -> int:
    """The seed of a seeded test: `$variable` when set (a replay), else `fixed` under `ci`, else a fresh one."""
    given = os.environ.get(variable)
    if given:
        return int(given)
    if PROFILE == "ci":
        return fixed
    return random.SystemRandom().randrange(1 << 30)


def replay_hint() -> str:
    """What a failed property's report adds: how to see the same failure again."""
    if PROFILE == "ci":
        return ("hypothesis profile 'ci' (derandomized): the same examples are drawn on every run, so re-running "
                "this test replays the failure")
    return ("hypothesis profile 'long' (randomized): the failing example is saved in .hypothesis/ and replayed first "
            "when this test runs again with TEST_PROFILE=long; or paste the @reproduce_failure line above onto "
            "the test")
