"""The whole-cluster simulation catches bugs put back on purpose (mutants.py): for each, the histories of its
profile and seeds must report the kind of problem the bug causes, and the same histories without the bug must
not (they are among the seeds test_cluster_sim.py plays). docs/testing.md lists the bugs."""

from __future__ import annotations

import pytest

from .mutants import MUTANTS
from .run import HISTORIES, play


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_simulation_catches_the_bug(name: str) -> None:
    mutant = MUTANTS[name]
    assert set(mutant.seeds) <= set(range(HISTORIES[mutant.profile]))  # seeds `make test` plays without the bug
    clean = play(list(mutant.seeds), mutant.profile)
    assert not [p for r in clean for p in r.problems if p.startswith(mutant.catches + ":")]
    results = play(list(mutant.seeds), mutant.profile, mutant.name)
    caught = [r.seed for r in results if any(p.startswith(mutant.catches + ":") for p in r.problems)]
    assert caught, f"the '{mutant.profile}' histories {list(mutant.seeds)} did not catch {name}: {mutant.doc}"
