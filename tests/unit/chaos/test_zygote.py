"""The zygote (chaos/zygote.py) against a real one: a forked `python -m vmqpy` says and returns what a fresh
interpreter does; exit statuses (SystemExit, an exception, a signal) come back as `subprocess` reports them; a
child has only descriptors 0, 1 and 2, its own session, environment, cwd and random seed; a start-up environment
other than the zygote's, and VMQPY_ZYGOTE=0, get a fresh interpreter.

Run as `python -m tests.unit.chaos.test_zygote WHAT` (by the zygote, in the tests below) this module is the child's
program: it prints a random draw, its view of itself, exits with a status, raises, or sleeps."""

from __future__ import annotations

import json
import os
import random
import resource
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import zygote
from chaos.zygote import ForkedProcess, Zygote

REPO = Path(__file__).resolve().parents[3]
ENTRY = "tests.unit.chaos.test_zygote"
WAIT_S = 20.0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (zygote.SWITCH, "PYTHONUNBUFFERED")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def server() -> Iterator[Zygote]:
    started = Zygote.start(_env(), str(REPO))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def children() -> Iterator[list[ForkedProcess]]:
    """The children a test appends here are killed (by PID) at its end if they still run."""
    started: list[ForkedProcess] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
            child.wait(WAIT_S)


def _spawn(server: Zygote, module: str, *argv: str, tmp_path: Path, env: dict[str, str] | None = None,
           session: bool = False) -> tuple[ForkedProcess, Path, Path]:
    out, err = tmp_path / f"out{time.monotonic_ns()}", tmp_path / f"err{time.monotonic_ns()}"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        child = server.spawn(module, argv, args=[sys.executable, "-m", module, *argv], stdin=subprocess.DEVNULL,
                             stdout=stdout, stderr=stderr, cwd=str(REPO), env=env or _env(),
                             start_new_session=session)
    return child, out, err


def _fresh(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "vmqpy", *argv], capture_output=True, cwd=str(REPO), env=_env(),
                          timeout=60)


@pytest.mark.parametrize("argv", [("--help",), ("config-reference",), ("start", "--config", "/nonexistent.conf")])
def test_a_forked_vmqpy_says_and_returns_what_a_fresh_interpreter_does(server: Zygote, tmp_path: Path,
                                                                      argv: tuple[str, ...]) -> None:
    child, out, err = _spawn(server, "vmqpy", *argv, tmp_path=tmp_path)
    code = child.wait(WAIT_S)
    fresh = _fresh(*argv)
    assert (code, out.read_bytes(), err.read_bytes()) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert child.poll() == code and child.returncode == code


def test_exit_statuses_come_back_as_subprocess_reports_them(server: Zygote, tmp_path: Path,
                                                          children: list[ForkedProcess]) -> None:
    exits, _, _ = _spawn(server, ENTRY, "exit", "3", tmp_path=tmp_path)
    raises, _, raised = _spawn(server, ENTRY, "raise", tmp_path=tmp_path)
    sleeps, _, _ = _spawn(server, ENTRY, "sleep", tmp_path=tmp_path)
    children.append(sleeps)
    assert exits.wait(WAIT_S) == 3
    assert raises.wait(WAIT_S) == 1
    assert "RuntimeError: raised in the child" in raised.read_text()
    with pytest.raises(subprocess.TimeoutExpired):
        sleeps.wait(0.3)
    assert sleeps.poll() is None
    sleeps.kill()
    assert sleeps.wait(WAIT_S) == -signal.SIGKILL
    sleeps.kill()  # a child that has exited is not signalled again (its PID may be another process's)


def test_a_child_is_waited_on_through_a_descriptor_above_1024(server: Zygote, tmp_path: Path) -> None:
    """select() cannot watch a descriptor above 1023; a test process with a flood of sockets holds such."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1200:
        pytest.skip("needs 1200 descriptors")
    null = os.open(os.devnull, os.O_RDONLY)
    held = [os.dup(null) for _ in range(1100)]
    try:
        child, _, _ = _spawn(server, ENTRY, "exit", "0", tmp_path=tmp_path)
        assert child.wait(WAIT_S) == 0
    finally:
        for fd in [null, *held]:
            os.close(fd)


def test_terminate_is_sigterm(server: Zygote, tmp_path: Path, children: list[ForkedProcess]) -> None:
    child, _, _ = _spawn(server, ENTRY, "sleep", tmp_path=tmp_path)
    children.append(child)
    _wait_for(lambda: _state(child.pid) in "SR", "the child sleeping")
    child.terminate()
    assert child.wait(WAIT_S) == -signal.SIGTERM


def test_a_child_holds_descriptors_0_1_2_only_in_a_session_of_its_own(server: Zygote, tmp_path: Path,
                                                                     children: list[ForkedProcess]) -> None:
    child, out, _ = _spawn(server, ENTRY, "sleep", tmp_path=tmp_path, session=True)
    children.append(child)
    _wait_for(lambda: out.read_text().startswith("sleeping"), "the child's line")
    assert sorted(os.listdir(f"/proc/{child.pid}/fd")) == ["0", "1", "2"]
    assert os.readlink(f"/proc/{child.pid}/fd/1") == str(out)
    assert os.getsid(child.pid) == child.pid
    with open(f"/proc/{child.pid}/status") as status:
        forked = _dispositions(status.read())
    fresh = subprocess.run([sys.executable, "-c", "print(open('/proc/self/status').read())"], capture_output=True,
                           text=True, timeout=60, env=_env())
    assert forked == _dispositions(fresh.stdout)  # a fresh interpreter's: SIGPIPE, SIGXFSZ ignored, SIGINT caught


def test_a_child_has_the_requests_environment_cwd_argv_and_its_own_random_seed(server: Zygote,
                                                                              tmp_path: Path) -> None:
    views = []
    for _ in range(2):
        child, out, err = _spawn(server, ENTRY, "show", tmp_path=tmp_path, env=_env(ZYGOTE_TEST_MARK="marked"))
        assert child.wait(WAIT_S) == 0, err.read_text()
        views.append(json.loads(out.read_text()))
    assert views[0]["random"] != views[1]["random"]
    for view in views:
        assert view["mark"] == "marked" and view["cwd"] == str(REPO) and view["path0"] == str(REPO)
        assert view["argv"] == [str(REPO / "tests" / "unit" / "chaos" / "test_zygote.py"), "show"]
        assert view["unbuffered"] is False


def test_pythonunbuffered_makes_the_childs_streams_unbuffered(server: Zygote, tmp_path: Path) -> None:
    child, out, err = _spawn(server, ENTRY, "show", tmp_path=tmp_path, env=_env(PYTHONUNBUFFERED="1"))
    assert child.wait(WAIT_S) == 0, err.read_text()
    assert json.loads(out.read_text())["unbuffered"] is True


def test_popen_forks_vmqpy_only_for_the_zygotes_start_up_environment(server: Zygote, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote, "_zygote", server)
    monkeypatch.delenv(zygote.SWITCH, raising=False)
    command = [sys.executable, "-m", "vmqpy", "--version"]
    runs = {
        "same": zygote.popen(command, stdout=subprocess.PIPE, cwd=REPO, env=_env()),
        "pythonpath": zygote.popen(command, stdout=subprocess.PIPE, cwd=REPO,
                                   env=_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")),
        "preload": zygote.popen(command, stdout=subprocess.PIPE, cwd=REPO, env=_env(LD_PRELOAD="")),
        "fresh": zygote.popen(command, stdout=subprocess.PIPE, cwd=REPO, env=_env(), fork=False),
        "other": zygote.popen([sys.executable, "-c", "print('vmqpy')"], stdout=subprocess.PIPE, cwd=REPO,
                              env=_env()),
    }
    monkeypatch.setenv(zygote.SWITCH, "0")
    runs["switched off"] = zygote.popen(command, stdout=subprocess.PIPE, cwd=REPO, env=_env())
    kinds = {name: type(proc).__name__ for name, proc in runs.items()}
    assert kinds == {"same": "ForkedProcess", "pythonpath": "Popen", "preload": "Popen", "fresh": "Popen",
                     "other": "Popen", "switched off": "Popen"}
    for proc in runs.values():
        assert proc.wait(60) == 0
        assert proc.stdout is not None
        assert b"vmqpy" in proc.stdout.read()
        proc.stdout.close()


def test_the_switch_is_not_passed_on_and_a_repeated_pythonpath_entry_is_the_same_path(server: Zygote) -> None:
    assert server.serves(_env(PYTHONPATH=f"{REPO}{os.pathsep}{REPO}"), str(REPO))
    assert not server.serves(_env(PYTHONHASHSEED="1"), str(REPO))
    assert not server.serves(_env(), "/")
    assert zygote.enabled({}) and zygote.enabled({"VMQPY_ZYGOTE": "1"}) and not zygote.enabled({"VMQPY_ZYGOTE": "0"})


def test_a_pythonpath_naming_only_the_cwd_is_no_pythonpath(server: Zygote, tmp_path: Path) -> None:
    # `python -m` puts its cwd first on sys.path: PYTHONPATH=cwd adds nothing a fresh interpreter would not have
    without = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    assert server.serves(without, str(REPO))
    assert not server.serves({**without, "PYTHONPATH": str(tmp_path)}, str(REPO))


@pytest.mark.parametrize("argv", [("--help",), ("cluster", "show")])
def test_vmq_admin_run_through_the_zygote_says_and_returns_what_a_fresh_interpreter_does(
        server: Zygote, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]) -> None:
    monkeypatch.setattr(zygote, "_zygote", server)
    monkeypatch.delenv(zygote.SWITCH, raising=False)
    command = [sys.executable, "-m", "admin.cli.main", *argv]
    env = _env(VMQ_ADMIN_URL="http://127.0.0.1:9")  # nothing listens there: `cluster show` fails with its message
    forked = zygote.popen(command, stdout=subprocess.DEVNULL, cwd=REPO, env=env)
    assert isinstance(forked, ForkedProcess)
    forked.wait(WAIT_S)
    done = zygote.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=WAIT_S)
    fresh = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert done.args == command


def test_communicate_reads_both_streams_and_times_out_as_popen_does(server: Zygote,
                                                                   children: list[ForkedProcess]) -> None:
    child = server.spawn(ENTRY, ["sleep"], args=[sys.executable, "-m", ENTRY, "sleep"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(REPO), env=_env(),
                         start_new_session=False)
    children.append(child)
    # its line written before the timeout starts (a loaded machine may take longer than the timeout to start
    # the child); select only looks, communicate reads it
    assert child.stdout is not None
    assert select.select([child.stdout], [], [], WAIT_S)[0], "the child's line"
    with pytest.raises(subprocess.TimeoutExpired):
        child.communicate(b"ignored", timeout=0.5)
    child.kill()
    out, err = child.communicate(timeout=WAIT_S)
    assert (out, err, child.returncode) == (b"sleeping\n", b"", -signal.SIGKILL)


def _dispositions(status: str) -> tuple[str, str]:
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return fields["SigIgn"].strip(), fields["SigCgt"].strip()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _wait_for(condition: object, what: str) -> None:
    assert callable(condition)
    end = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < end, f"no {what} within {WAIT_S}s"
        time.sleep(0.02)


def _child_main(argv: list[str]) -> None:
    """The child's program (run by the zygote as `python -m tests.unit.chaos.test_zygote WHAT`)."""
    what = argv[0]
    if what == "exit":
        sys.exit(int(argv[1]))
    if what == "raise":
        raise RuntimeError("raised in the child")
    if what == "sleep":
        print("sleeping", flush=True)
        time.sleep(WAIT_S * 3)
        return
    unbuffered = getattr(sys.stdout, "write_through", None)
    print(json.dumps({"random": random.random(), "mark": os.environ.get("ZYGOTE_TEST_MARK"), "cwd": os.getcwd(),
                      "path0": sys.path[0], "argv": sys.argv, "unbuffered": unbuffered}))


if __name__ == "__main__":
    _child_main(sys.argv[1:])
