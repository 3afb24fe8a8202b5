"""vmqpy.hangup.Hangup: a SIGHUP while the node starts is kept and acted on once the node can reload; after that
each SIGHUP reloads at once; while the node stops, they are kept again (the integration test with a real process:
tests/integration/test_cluster_tls.py::test_a_sighup_while_the_node_starts_is_kept_and_acted_on_once_it_has_started).
"""

from __future__ import annotations

import pytest

from vmqpy.hangup import Hangup


@pytest.mark.parametrize(
    ("before", "after", "reloads"),
    [
        (0, 0, 0),  # no signal, no reload
        (1, 0, 1),  # one kept while starting: one reload when the node can
        (3, 0, 1),  # several while starting are one reload: the files are read once, after all of them
        (0, 2, 2),  # once serving, each one reloads
        (2, 2, 3),
    ],
)
def test_signals_before_and_after_the_node_can_reload(before: int, after: int, reloads: int) -> None:
    hangup = Hangup()
    done: list[int] = []
    for _ in range(before):
        hangup.signalled()
    assert done == [] and hangup.pending is (before > 0)
    hangup.serve(lambda: done.append(1))
    for _ in range(after):
        hangup.signalled()
    assert len(done) == reloads
    assert not hangup.pending


def test_a_signal_while_the_node_stops_is_kept_not_acted_on() -> None:
    hangup = Hangup()
    done: list[int] = []
    hangup.serve(lambda: done.append(1))
    hangup.serve(None)
    hangup.signalled()
    assert done == [] and hangup.pending
