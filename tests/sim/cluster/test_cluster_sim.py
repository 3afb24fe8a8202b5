"""The whole-cluster simulation (histories.py): seeded histories of three real nodes on simulated time, checked
for what docs/ promises. Each profile's histories are played once per test process, in a child process with a
fixed PYTHONHASHSEED (run.py), and each checker is one test, so that a report names the promise broken.

`make test` (TEST_PROFILE=ci) plays the fixed seeds 0..N-1 of each profile; `make test-long` (TEST_PROFILE=long)
plays 25 times as many from a fresh base seed. `SIM_SEED=S` plays seed S only, `SIM_HISTORIES=N` N seeds.
A failure prints the seed, the replay command, the history and the clients' events.

Known findings (docs/testing.md, "What the simulation found"): QoS 2 messages reach a persistent subscriber
twice when it is taken over while they are routed (every profile); acknowledged messages lost and persistent
sessions gone after a leave and a rejoin; under the long profile also after partitions and crashes. Their tests
are marked xfail until the bugs are fixed: strict under `ci` (its fixed seeds hit each of them, so a fix, or a
change that hides one, fails the run as XPASS and the mark must go), not strict under `long` (other seeds).
"""

from __future__ import annotations

import functools
import os

import pytest

from tests import randomness

from .run import HISTORIES, Result, play

CHECKS = ("lost", "duplicated", "sessions", "diverged", "resurrected", "forgotten", "stuck", "vanished")
DUPLICATES = "QoS 2 delivered twice after a takeover during routing"
#: (profile, check) -> the finding it fails on (docs/testing.md, "What the simulation found"): those the fixed
#: seeds of `make test` hit, and under `make test-long` also those seen on other seeds
KNOWN = {
    **{(profile, "duplicated"): DUPLICATES for profile in HISTORIES},
    ("churn", "lost"): "acknowledged messages lost across a leave -k and a rejoin",
}
if randomness.PROFILE != "ci":
    KNOWN.update({
        ("churn", "forgotten"): "a persistent session gone after a leave -k and a rejoin",
        ("partitions", "lost"): "acknowledged messages lost across partitions and takeovers",
        ("partitions", "stuck"): "a persistent session refused (server unavailable) for good after partitions",
        ("partitions", "forgotten"): "a persistent session gone after partitions and takeovers",
        ("crashes", "lost"): "acknowledged messages lost across crashes and takeovers",
        ("crashes", "stuck"): "a persistent session refused (server unavailable) for good after a crash",
        ("churn", "stuck"): "a persistent session refused (server unavailable) for good after a leave and a rejoin",
    })

def seeds(profile: str) -> list[int]:
    if os.environ.get("SIM_SEED"):
        return [int(os.environ["SIM_SEED"])]
    count = int(os.environ.get("SIM_HISTORIES", "0")) or HISTORIES[profile] * (1 if randomness.PROFILE == "ci" else 25)
    base = randomness.seed("SIM_SEED_BASE", 0)
    return list(range(base, base + count))


@functools.cache
def results(profile: str) -> list[Result]:
    return play(seeds(profile), profile)


def report(profile: str, check: str, failed: list[Result]) -> str:
    first = failed[0]
    problems = [p for p in first.problems if p.startswith(check + ":")]
    lines = [f"{check}: {len(failed)} of {len(results(profile))} '{profile}' histories broke the promise; "
             f"seeds {[r.seed for r in failed]}",
             f"replay: SIM_SEED={first.seed} .venv/bin/python -m pytest -p no:cacheprovider tests/sim/cluster "
             f"-k '{profile} and {check}'",
             f"    or: .venv/bin/python -m tests.sim.cluster.run --profile {profile} --trace {first.seed}",
             *problems[:10], "history:", first.history, "events:", *first.trace[-200:]]
    return "\n".join(lines)


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("profile", list(HISTORIES))
def test_histories_keep_the_promise(profile: str, check: str, request: pytest.FixtureRequest) -> None:
    known = KNOWN.get((profile, check))
    if known is not None:
        request.applymarker(pytest.mark.xfail(reason=f"finding: {known}", strict=randomness.PROFILE == "ci"))
    failed = [r for r in results(profile) if any(p.startswith(check + ":") for p in r.problems)]
    assert not failed, report(profile, check, failed)


def test_histories_acknowledge_publishes() -> None:
    """The calm histories are not vacuous: most publishes are acknowledged, and the subscribers get them."""
    calm = results("calm")
    assert sum(r.acked for r in calm) > 0.8 * sum(r.sent for r in calm)


def test_a_seed_replays_the_same_history() -> None:
    first, again = play([3], "all", trace=True), play([3], "all", trace=True)
    assert first[0].trace == again[0].trace
    assert first[0].problems == again[0].problems


@pytest.mark.parametrize(("profile", "seed"), [("calm", 0), ("churn", 5)])
def test_a_history_plays_the_same_on_the_compiled_and_the_pure_core(profile: str, seed: int) -> None:
    """vmqpy/native.py: the compiled core must be the pure one, event for event. churn 5 is where the compiled
    driver once read the real wall clock (`time.time()` on the module, which the simulation's clock patch does not
    reach in compiled code), took another path and broke the promise ("forgotten")."""
    compiled, pure = play([seed], profile, trace=True), play([seed], profile, trace=True, pure=True)
    assert compiled[0].trace == pure[0].trace
    assert compiled[0].problems == pure[0].problems
