"""bench.suite_cpu: the report adds up what was sampled within each module's span on its worker; the sampler
attributes a child process to the worker it descends from."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench import suite_cpu


def _write(folder: Path) -> None:
    t0 = 1000.0
    (folder / "timeline-gw0.tsv").write_text(
        f"{t0:.2f}\t{t0 + 10:.2f}\ttests/unit/a/test_x.py::test_1\n"
        f"{t0 + 10:.2f}\t{t0 + 40:.2f}\ttests/unit/a/test_x.py::test_2\n"
        f"{t0 + 40:.2f}\t{t0 + 60:.2f}\ttests/integration/test_y.py::test_3\n")
    (folder / "timeline-gw1.tsv").write_text(f"{t0:.2f}\t{t0 + 60:.2f}\ttests/sim/test_z.py::test_4\n")
    samples = []
    for i in range(1, 121):  # every 0.5 s for 60 s: gw0's worker 0.5 s, gw0's nodes 0.25 s (after 40 s), gw1's 0.5
        stamp = t0 + 0.5 * i
        pairs = ["gw0|worker=0.5", "gw1|worker=0.5"] + (["gw0|node=0.25"] if stamp > t0 + 40.5 else [])
        samples.append(f"{stamp:.2f}\t" + "\t".join(pairs))
    (folder / "samples.tsv").write_text("\n".join(samples) + "\n")


def test_the_report_adds_up_each_module_on_its_worker(tmp_path: Path) -> None:
    _write(tmp_path)
    text = suite_cpu.report(tmp_path)
    # 120 samples: the workers' 120 s and the nodes' 0.25 s in the 39 samples after 40.5 s
    assert text.splitlines()[:4] == ["main pass: 60 s from the first test's start to the last one's end",
                                     "CPU in the main pass: 130 s; by class:", "    120.0  worker", "      9.8  node"]
    # 59 samples of 1.0 in the first 30 s; 60 of 1.0 and 38 of 0.25 in the next; the one at 60 s
    assert "cores busy per 30 s: 1.97 2.32 0.04" in text
    assert "CPU by test folder: sim 60 s, unit 40 s, integration 30 s" in text
    # a module's span takes the samples up to its end and the one just after it (0.5 s): the unit module's 81
    # samples of gw0's worker; the integration one's 40 of them and the 39 of its nodes
    assert "    40.5   40.0  tests/unit/a/test_x.py" in text
    assert "    29.8   20.0  tests/integration/test_y.py" in text
    assert "  gw0 (ends 60): test_x 0-40, test_y 40-60" in text


def test_the_sampler_attributes_a_child_to_its_worker(tmp_path: Path) -> None:
    (tmp_path / "pid-gw3").write_text(str(os.getpid()))
    sampler = suite_cpu.Sampler(tmp_path)
    sampler.sample()
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.4\n"
                              "while time.process_time() < end: pass\ntime.sleep(5)"])
    try:
        used: dict[str, float] = {}
        deadline = time.monotonic() + 20
        while used.get("gw3|python", 0.0) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.2)
            for key, spent in sampler.sample().items():
                used[key] = used.get(key, 0.0) + spent
        assert used.get("gw3|python", 0.0) >= 0.3, used
    finally:
        child.kill()
        child.wait(10)
