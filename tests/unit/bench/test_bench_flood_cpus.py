"""bench.flood's CPU pinning options: `--node-cpus`/`--attacker-cpus` parse a list of CPU numbers (a table and
the refusals argparse turns into a usage error), and `pin` pins every thread of a process, here a real child
process with two threads, whose affinity is read back from the kernel."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from bench.flood import cpu_set, parse_args, pin


@pytest.mark.parametrize(("text", "cpus"), [
    (None, None),
    ("", None),
    ("0", {0}),
    ("1", {1}),
    ("0,1", {0, 1}),
    ("3,1,3", {1, 3}),
])
def test_cpu_lists(text: str | None, cpus: set[int] | None) -> None:
    assert cpu_set(text) == cpus


@pytest.mark.parametrize("text", ["x", "0,", "-1", "1;2", "0.5"])
def test_what_is_not_a_cpu_list_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a list of CPU numbers"):
        cpu_set(text)


def test_the_options_reach_the_arguments() -> None:
    args = parse_args(["--mode", "slowloris", "--node-cpus", "0", "--attacker-cpus", "1"])
    assert (args.node_cpus, args.attacker_cpus) == ({0}, {1})
    assert (parse_args([]).node_cpus, parse_args([]).attacker_cpus) == (None, None)


def test_pin_pins_every_thread_of_a_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                              "print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        target = {min(os.sched_getaffinity(0))}
        pin(child.pid, target)
        threads = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(threads) == 2
        assert all(os.sched_getaffinity(t) == target for t in threads)
        pin(child.pid, None)  # nothing asked: nothing changed
        assert all(os.sched_getaffinity(t) == target for t in threads)
    finally:
        child.kill()
        child.wait(10)
