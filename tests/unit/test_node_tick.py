"""vmqpy.node_tick: the node's tick runs the broker's tick, counts and logs a stalled loop, and its watchdog writes
the stack of a loop held longer than `dump_after` while the stall goes on (in a child process: the watchdog is
process-wide and writes to the process's stderr)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = """
import asyncio, collections, time
from vmqpy.node_tick import ticking

class Broker:
    def __init__(self):
        self.metrics = collections.Counter()
        self.ticks = 0
    def tick(self, now):
        self.ticks += 1

def hold_the_loop_for_a_while():
    time.sleep(0.9)

async def main():
    broker = Broker()
    async with ticking(broker, interval=0.05, dump_after=0.4):
        await asyncio.sleep(0.3)
        hold_the_loop_for_a_while()
        await asyncio.sleep(0.3)
    print("ticks", broker.ticks, "stalls", broker.metrics["loop_stalls"], flush=True)

asyncio.run(main())
"""


def run_child() -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[2])


def test_a_held_loop_is_counted_logged_and_its_stack_written_while_it_is_held() -> None:
    done = run_child()
    assert done.returncode == 0, done.stderr
    words = done.stdout.splitlines()[-1].split()
    assert words[0] == "ticks" and int(words[1]) >= 5 and words[2:] == ["stalls", "1"], done.stdout
    assert "event loop stalled" in done.stdout + done.stderr
    # the watchdog's dump names the function holding the loop, and is written once (not re-armed during it)
    assert "hold_the_loop_for_a_while" in done.stderr, done.stderr
    assert done.stderr.count("Timeout (0:00:00.400000)!") == 1, done.stderr
