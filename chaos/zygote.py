"""A fork server ("zygote") for `python -m vmqpy ...` node processes and `python -m admin.cli.main ...`
(`vmq-admin`) calls: one interpreter that has imported everything they import forks a child per command, so a
node start costs a fork instead of an interpreter start and ~0.4 s of CPU of imports, a `vmq-admin` call ~0.15 s
(docs/testing.md, "Node processes forked from a zygote").

Server: `python -m chaos.zygote SOCKET CWD` imports `vmqpy.__main__`, `vmqpy.node` and `admin.cli.main` with the
`sys.path` that `python -m vmqpy` run in CWD has, freezes the garbage collector's objects and serves on the AF_UNIX
stream socket SOCKET, single-threaded (a selectors loop; forking a threaded process is unsafe). A request carries
the module, argv, cwd, environment, umask and whether to start a new session, and three descriptors (stdin, stdout,
stderr). The child becomes what `python -m MODULE ARGV` would be: its own session if asked, those three descriptors
as 0, 1 and 2 and no other, the signal dispositions of a fresh interpreter, the request's cwd, umask and
environment, a fresh `random` seed and fresh standard streams; it runs the module's main through `runpy` and ends
with `os._exit` (after the interpreter's own end: non-daemon threads joined, atexit functions, streams flushed). The
server answers the child's PID on the request's connection, then its exit status (as `subprocess` reports it: minus
the signal number for a signal), and closes it. A child whose connection closed first keeps running: the harness
stops processes by PID. The server exits when its parent does, killing nothing.

Client: `popen` starts a command as `subprocess.Popen` would, through the zygote for `[sys.executable, "-m", MODULE,
...]` with MODULE one of FORKED (a `ForkedProcess`, the subset of Popen the harness and the tests use); `run` is
`subprocess.run` on top of it. The zygote is started by the first such call of a process, with that call's
environment and cwd, and stopped at exit by its PID. A call whose start-up environment (PYTHON*, LD_*, locale, TZ,
...) or cwd differs from the zygote's, or that asks for `fork=False`, gets a fresh interpreter (`subprocess.Popen`),
as does every call when `VMQPY_ZYGOTE=0` or when the zygote cannot start or has died (one warning on stderr).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

#: The modules a zygote runs as `python -m MODULE` (it imports them before it serves).
FORKED = ("vmqpy", "admin.cli.main")
#: `VMQPY_ZYGOTE=0` in the environment: every node is a fresh interpreter. The variable is not passed on to the
#: started process (vmqpy reads VMQPY_* variables as settings and refuses unknown ones).
SWITCH = "VMQPY_ZYGOTE"
CHAOS_ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 60.0  # the zygote's imports on a loaded 2-core machine
REPLY_TIMEOUT_S = 30.0  # a fork and the PID's answer
REQUEST_TIMEOUT_S = 5.0  # the server's read of one request
TICK_S = 0.5  # the server's check of its parent
MAX_REQUEST = 1 << 20
_HEADER = struct.Struct("!I")
#: Environment variables read when an interpreter starts or a node's libraries are imported: a request must carry
#: the zygote's values, or its child would run with settings (or code) other than a fresh interpreter's.
_STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_", "MALLOC_", "FAKETIME")
_STARTUP_NAMES = ("LANG", "LANGUAGE", "TZ", "GLIBC_TUNABLES", "MSGPACK_PUREPYTHON", "SETUPTOOLS_USE_DISTUTILS")
#: ... except this one, which the child applies itself (it makes its standard streams unbuffered).
_APPLIED = ("PYTHONUNBUFFERED",)
#: Started-at-preload variables: a zygote never starts with these (libfaketime would tick in the zygote itself).
_PRELOAD = ("LD_PRELOAD", "FAKETIME")


class NodeProcess(Protocol):
    """What the harness uses of a started process: a `subprocess.Popen` or a `ForkedProcess`."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


# ---------------------------------------------------------------------------------------------------- the server


def _send_message(conn: socket.socket, message: Mapping[str, Any]) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request: a 4-byte length and JSON, the descriptors in the first message's ancillary data."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    for _ in range(MAX_REQUEST // 4096 + 2):
        if len(data) >= _HEADER.size and len(data) >= _HEADER.size + _HEADER.unpack_from(data)[0]:
            break
        more = conn.recv(65536)
        if not more:
            break
        data += more
    if len(data) < _HEADER.size or len(data) != _HEADER.size + _HEADER.unpack_from(data)[0] or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("malformed request")
    return json.loads(data[_HEADER.size:]), list(fds)


def _fresh_stdio(unbuffered: bool) -> None:
    """Standard streams as a fresh interpreter makes them on the new 0, 1 and 2 (Python/pylifecycle.c)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, f"__{name}__") or getattr(sys, name)
        write = fd != 0
        buffering = 0 if unbuffered and write else -1
        buf: Any = open(fd, "wb" if write else "rb", buffering=buffering, closefd=False)
        raw = buf if buffering == 0 else buf.raw
        line_buffering = not (unbuffered and write) and (raw.isatty() or fd == 2)
        stream = io.TextIOWrapper(buf, encoding=getattr(old, "encoding", None), errors=getattr(old, "errors", None),
                                  newline="\n", line_buffering=line_buffering,
                                  write_through=unbuffered and write)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _exit_code(code: object) -> int:
    """SystemExit's code as the interpreter maps it: None 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:  # a broken stderr: the exit status still says it
        pass
    return 1


def _finalize() -> None:
    """What the interpreter does at its end: join non-daemon threads, run the atexit functions, flush."""
    shutdown: Any = getattr(threading, "_shutdown", None)
    run_exitfuncs: Any = getattr(atexit, "_run_exitfuncs", None)
    for step in (shutdown, run_exitfuncs):
        if step is not None:
            try:
                step()
            except BaseException:  # as the interpreter, report and go on
                traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # nowhere left to report it
            pass


def _run_module(module: str) -> int:
    """`python -m MODULE` in this process: its exit status; a KeyboardInterrupt ends it by SIGINT, as there."""
    interrupted = False
    try:
        import runpy

        # As in a fresh `python -m`, the module (a package's __main__) runs as `__main__` only, not also under its
        # own name (runpy warns otherwise); what it imports stays imported.
        sys.modules.pop(f"{module}.__main__", None)
        if not hasattr(sys.modules.get(module), "__path__"):
            sys.modules.pop(module, None)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code, interrupted = 130, True
    except BaseException:  # an uncaught exception: its traceback and status 1
        traceback.print_exc()
        code = 1
    _finalize()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


class _Server:
    def __init__(self, path: str, cwd: str) -> None:
        self.path = path
        self.cwd = cwd
        self.parent = os.getppid()
        self.children: dict[int, socket.socket | None] = {}
        # The dispositions a fresh interpreter has, restored in each child before its main runs.
        self.dispositions = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGCHLD, signal.SIGTERM)}
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.wake_r, self.wake_w = os.pipe()  # bare descriptors: nothing of them is finalized in a child
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        # A poll selector holds no descriptor of its own (epoll would: a child would inherit an object to close).
        self.selector = selectors.PollSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)

    def serve(self) -> int:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)  # wakes the loop through the wakeup descriptor
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the parent's to handle; it exits, we follow
        while os.getppid() == self.parent:  # ends with the parent (bounded by its life), checked every TICK_S
            for key, _events in self.selector.select(TICK_S):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj == self.wake_r:
                    self._drain()
                else:
                    self._forget(key.fileobj, key.data)  # type: ignore[arg-type]
            self._reap()
        return 0

    def _drain(self) -> None:
        for _ in range(64):
            try:
                if not os.read(self.wake_r, 4096):
                    return
            except BlockingIOError:
                return

    def _accept(self) -> None:
        for _ in range(64):
            try:
                conn, _addr = self.listener.accept()
            except BlockingIOError:
                return
            conn.settimeout(REQUEST_TIMEOUT_S)
            try:
                request, fds = _recv_request(conn)
            except (OSError, ValueError) as exc:
                try:
                    _send_message(conn, {"error": str(exc)})
                except OSError:
                    pass
                conn.close()
                continue
            self._fork(conn, request, fds)

    def _fork(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        assert threading.active_count() == 1, "the zygote must stay single-threaded to fork"
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            self._child(conn, request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        try:
            _send_message(conn, {"pid": pid})
        except OSError:
            self.children[pid] = None
            conn.close()
            return
        conn.setblocking(False)
        self.selector.register(conn, selectors.EVENT_READ, pid)

    def _forget(self, conn: socket.socket, pid: int) -> None:
        """The client closed the child's connection: the child runs on, its status is not sent."""
        self.selector.unregister(conn)
        conn.close()
        if pid in self.children:
            self.children[pid] = None

    def _reap(self) -> None:
        for _ in range(len(self.children) + 1):
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                try:
                    _send_message(conn, {"returncode": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                self.selector.unregister(conn)
                conn.close()

    def _child(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig, disposition in self.dispositions.items():
                signal.signal(sig, disposition)
            if request["session"]:
                os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            # The sockets' objects forget their descriptors (never closed twice), then every descriptor above 2 goes.
            self.listener.detach()
            conn.detach()
            for other in self.children.values():
                if other is not None:
                    other.detach()
            os.closerange(3, 0x7FFFFFFF)
            os.chdir(request["cwd"])
            os.umask(request["umask"])
            os.environ.clear()
            os.environ.update(request["env"])
            import random

            random.seed()
            sys.argv = ["-m", *request["argv"]]
            sys.path[0] = request["cwd"]
            _fresh_stdio(bool(os.environ.get("PYTHONUNBUFFERED")))
            code = _run_module(request["module"])
        except BaseException:  # whatever happens, the child never returns into the server
            try:
                traceback.print_exc()
            except BaseException:
                pass
        finally:
            os._exit(code)


def serve(path: str, cwd: str) -> int:
    """The server's main: the node's imports with `python -m vmqpy`'s sys.path in `cwd`, then the loop."""
    import gc

    sys.path[0] = cwd  # `python -m` puts its cwd first; this process's own is chaos's root, already imported
    os.chdir(cwd)
    import admin.cli.main  # noqa: F401 - imported for the children
    import vmqpy.__main__
    import vmqpy.node

    try:
        import uvloop  # noqa: F401 - vmqpy's main imports it (optional)
    except ImportError:
        pass
    gc.collect()
    gc.freeze()  # the imported objects stay out of the children's collections: their pages stay shared
    server = _Server(path, cwd)
    ready = {"vmqpy": os.path.dirname(os.path.abspath(vmqpy.__main__.__file__)), "pid": os.getpid()}
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the client closes the pipe it read `ready` from
    os.close(null)
    return server.serve()


# ---------------------------------------------------------------------------------------------------- the client


def _startup_view(env: Mapping[str, str], cwd: str) -> dict[str, str]:
    """The variables of `env` an interpreter or the node's imports read at start-up, for `python -m` in `cwd`
    (PYTHONPATH normalized)."""
    view = {k: v for k, v in env.items()
            if (k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES or k.endswith("_NO_EXTENSIONS"))
            and k not in _APPLIED}
    if "PYTHONPATH" in view:
        # A repeated entry changes nothing, an empty one neither, nor the cwd: `python -m` puts it first already.
        entries = [os.path.normpath(p) for p in view["PYTHONPATH"].split(os.pathsep) if p]
        kept = [p for p in dict.fromkeys(entries) if os.path.realpath(p) != cwd]
        if kept:
            view["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del view["PYTHONPATH"]
    return view


def _umask() -> int:
    """This process's umask, read without changing it (os.umask would, for an instant)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _readable(what: socket.socket | IO[bytes], timeout: float | None) -> bool:
    """`what` has something to read (or its end) within `timeout` seconds (None: waits). poll, not select: the
    test process may hold descriptors above select's 1024 (test_cluster_strangers floods 600 sockets)."""
    poller = select.poll()
    poller.register(what, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, round(timeout * 1000))))


class ForkedProcess:
    """A child of the zygote, as much of `subprocess.Popen` as the harness and the tests use. Its status comes on
    the connection of its request."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = None
        self.stdout: IO[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self._conn: socket.socket | None = conn
        self._buffer = b""
        self._output: dict[str, list[bytes]] = {"stdout": [], "stderr": []}  # what `communicate` read so far

    def __repr__(self) -> str:
        return f"<ForkedProcess: returncode: {self.returncode} args: {self.args!r}>"

    def _take(self, timeout: float | None) -> None:
        """Read the status if it comes within `timeout` (None: wait for it; 0: only what is there)."""
        conn = self._conn
        if conn is None or self.returncode is not None:
            return
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else max(0.0, end - time.monotonic())
            if not _readable(conn, left):
                return
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            if not data:
                self._zygote_gone()
                return
            self._buffer += data
            if b"\n" in self._buffer:
                line = self._buffer.split(b"\n", 1)[0]
                self.returncode = int(json.loads(line)["returncode"])
                self._close()

    def _zygote_gone(self) -> None:
        """The zygote died before the child: its status is lost; the child is followed by its PID alone."""
        self._close()
        _warn("the zygote exited before a child it started: that child's exit status is unknown (255)")

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _orphan_poll(self) -> int | None:
        if self.returncode is None and self._conn is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = 255
            except PermissionError:
                pass
        return self.returncode

    def poll(self) -> int | None:
        self._take(0)
        return self._orphan_poll()

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        self._take(timeout)
        while self._orphan_poll() is None and self._conn is None:  # an orphan: its PID, polled
            if end is not None and time.monotonic() >= end:
                break
            time.sleep(0.05)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout if timeout is not None else 0.0)
        return self.returncode

    def communicate(self, input: bytes | None = None,
                    timeout: float | None = None) -> tuple[bytes | None, bytes | None]:
        """`Popen.communicate`: `input` written and stdin closed, stdout and stderr read to their ends, the status
        waited for; TimeoutExpired when that takes longer than `timeout` (call again to go on)."""
        end = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None and not self.stdin.closed:
            if input:
                try:
                    self.stdin.write(input)
                except BrokenPipeError:
                    pass
            try:
                self.stdin.close()
            except BrokenPipeError:
                pass
        chunks = self._output
        with selectors.DefaultSelector() as selector:
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None and not stream.closed:
                    selector.register(stream.fileno(), selectors.EVENT_READ, name)
            while selector.get_map():
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
                for key, _events in selector.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.data].append(data)
                    else:
                        selector.unregister(key.fd)
                        getattr(self, key.data).close()
        self.wait(None if end is None else max(0.0, end - time.monotonic()))
        return (b"".join(chunks["stdout"]) if self.stdout is not None else None,
                b"".join(chunks["stderr"]) if self.stderr is not None else None)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The client's handle of one zygote server: its process, its socket, what it was started with."""

    def __init__(self, proc: subprocess.Popen[bytes], workdir: Path, env: Mapping[str, str], cwd: str) -> None:
        self.proc = proc
        self.workdir = workdir
        self.path = str(workdir / "zygote.sock")
        self.view = _startup_view(env, cwd)
        self.cwd = cwd

    @classmethod
    def start(cls, env: Mapping[str, str], cwd: str) -> Zygote:
        """A zygote with `env` whose children run in `cwd`, ready to fork. Raises OSError when it does not get
        there (its stderr in the message)."""
        cwd = os.path.realpath(cwd)
        workdir = Path(tempfile.mkdtemp(prefix="vmqpy-zygote-"))
        log = workdir / "zygote.log"
        with log.open("wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "chaos.zygote", str(workdir / "zygote.sock"), cwd],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                    cwd=str(CHAOS_ROOT), env=dict(env))
        zygote = cls(proc, workdir, env, cwd)
        assert proc.stdout is not None
        try:
            line = proc.stdout.readline() if _readable(proc.stdout, READY_TIMEOUT_S) else b""
        finally:
            proc.stdout.close()
        if not line.startswith(b"{"):
            zygote.stop()
            raise OSError(f"the zygote did not start: {log.read_text(errors='replace')[-2000:] or 'no output'}")
        return zygote

    def alive(self) -> bool:
        return self.proc.poll() is None

    def serves(self, env: Mapping[str, str], cwd: str | None) -> bool:
        """A fresh interpreter with `env` in `cwd` would run what this zygote's children run."""
        where = os.path.realpath(cwd if cwd is not None else os.getcwd())
        return where == self.cwd and _startup_view(env, where) == self.view

    def spawn(self, module: str, argv: Sequence[str], *, args: list[str], stdin: Any, stdout: Any, stderr: Any,
              cwd: str | None, env: Mapping[str, str], start_new_session: bool) -> ForkedProcess:
        """`python -m MODULE ARGV` as a child of the zygote. Raises OSError when the zygote does not answer."""
        opened: list[int] = []  # our descriptors for the child, closed once it has them
        parent_ends: dict[str, int] = {}

        def child_fd(spec: Any, index: int) -> int:
            if spec is None:
                return index
            if spec == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
                opened.append(fd)
                return fd
            if spec == subprocess.PIPE:
                r, w = os.pipe()
                mine, theirs = (w, r) if index == 0 else (r, w)
                parent_ends[("stdin", "stdout", "stderr")[index]] = mine
                opened.append(theirs)
                return theirs
            if isinstance(spec, int):
                return spec
            return int(spec.fileno())

        fds = [child_fd(stdin, 0), child_fd(stdout, 1)]
        fds.append(fds[1] if stderr == subprocess.STDOUT else child_fd(stderr, 2))
        request = {"module": module, "argv": list(argv), "cwd": os.path.realpath(cwd or os.getcwd()),
                   "env": dict(env), "session": start_new_session, "umask": _umask()}
        body = json.dumps(request).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(REPLY_TIMEOUT_S)
            conn.connect(self.path)
            socket.send_fds(conn, [_HEADER.pack(len(body)) + body], fds)
            reply = b""
            for _ in range(64):
                if b"\n" in reply:
                    break
                more = conn.recv(4096)
                if not more:
                    break
                reply += more
            answer = json.loads(reply.split(b"\n", 1)[0]) if b"\n" in reply else {"error": "no answer"}
            if "pid" not in answer:
                raise OSError(f"the zygote refused: {answer.get('error')}")
        except (OSError, ValueError) as exc:
            conn.close()
            for fd in parent_ends.values():
                os.close(fd)
            raise OSError(str(exc)) from exc
        finally:
            for fd in opened:
                os.close(fd)
        proc = ForkedProcess(args, conn, int(answer["pid"]))
        for name, fd in parent_ends.items():
            setattr(proc, name, open(fd, "wb" if name == "stdin" else "rb"))
        return proc

    def stop(self) -> None:
        """SIGTERM by its PID (its children run on), and its directory removed."""
        if self.proc.poll() is None:
            try:
                self.proc.terminate()
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.workdir, ignore_errors=True)


_zygote: Zygote | None = None
_failed = False
_warned = False
_lock = threading.Lock()


def _warn(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(f"chaos.zygote: {message}; node processes start as fresh interpreters", file=sys.stderr)


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """The zygote is used unless VMQPY_ZYGOTE=0 (or off, no, false)."""
    return environ.get(SWITCH, "1").strip().lower() not in ("0", "off", "no", "false")


def _zygote_for(env: Mapping[str, str], cwd: str | None) -> Zygote | None:
    """This process's zygote if it serves a start with `env` in `cwd`; started by the first start that may."""
    global _zygote, _failed
    with _lock:
        if _zygote is None and not _failed and not any(k.startswith(_PRELOAD) for k in env):
            try:
                _zygote = Zygote.start(env, cwd if cwd is not None else os.getcwd())
            except OSError as exc:
                _failed = True
                _warn(str(exc).strip().splitlines()[-1] if str(exc).strip() else "the zygote did not start")
        if _zygote is not None and not _zygote.alive():
            _warn(f"the zygote (PID {_zygote.proc.pid}) exited with {_zygote.proc.returncode}")
            _zygote.stop()
            _zygote, _failed = None, True
        return _zygote if _zygote is not None and _zygote.serves(env, cwd) else None


def stop() -> None:
    """Stop this process's zygote (at exit; the children it started run on)."""
    global _zygote
    with _lock:
        if _zygote is not None:
            _zygote.stop()
            _zygote = None


# Registered at import, before chaos.processes registers its stop_all: atexit runs it after that one, so the nodes
# are stopped (and their statuses read) before their zygote goes.
atexit.register(stop)


def popen(command: Sequence[str], *, stdin: Any = None, stdout: Any = None, stderr: Any = None,
          cwd: str | Path | None = None, env: Mapping[str, str] | None = None, start_new_session: bool = False,
          fork: bool = True) -> subprocess.Popen[bytes] | ForkedProcess:
    """`subprocess.Popen(command, ...)`, forked from the zygote for `[sys.executable, "-m", MODULE, ...]` (MODULE
    one of FORKED) when it is enabled and serves this environment and cwd; `fork=False` asks for a fresh
    interpreter."""
    base = os.environ if env is None else env
    child_env = {k: v for k, v in base.items() if k != SWITCH}
    args = list(command)
    where = str(cwd) if cwd is not None else None
    if fork and args[:2] == [sys.executable, "-m"] and len(args) > 2 and args[2] in FORKED and enabled():
        zygote = _zygote_for(child_env, where)
        if zygote is not None:
            try:
                return zygote.spawn(args[2], args[3:], args=args, stdin=stdin, stdout=stdout, stderr=stderr,
                                    cwd=where, env=child_env, start_new_session=start_new_session)
            except OSError as exc:
                _warn(f"the zygote did not fork: {exc}")
    return subprocess.Popen(args, stdin=stdin, stdout=stdout, stderr=stderr, cwd=where, env=child_env,
                            start_new_session=start_new_session)


def run(command: Sequence[str], *, input: str | bytes | None = None, capture_output: bool = False,
        text: bool = False, timeout: float | None = None, cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None, check: bool = False) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(command, ...)` for what the tests pass it, through `popen` (so forked where it may be)."""
    pipe = subprocess.PIPE if capture_output else None
    proc = popen(command, stdin=subprocess.PIPE if input is not None else None, stdout=pipe, stderr=pipe,
                 cwd=cwd, env=env)
    data = input.encode() if isinstance(input, str) else input
    try:
        out, err = proc.communicate(data, timeout)
    except subprocess.TimeoutExpired as late:
        proc.kill()
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(list(command), timeout or 0.0, _decoded(out, text),
                                        _decoded(err, text)) from late
    code = proc.wait()
    done: subprocess.CompletedProcess[Any] = subprocess.CompletedProcess(
        list(command), code, _decoded(out, text), _decoded(err, text))
    if check:
        done.check_returncode()
    return done


def _decoded(data: bytes | None, text: bool) -> str | bytes | None:
    """Output as `subprocess.run(text=...)` gives it: bytes, or text in the locale's encoding, newlines
    translated."""
    if data is None or not text:
        return data
    return io.TextIOWrapper(io.BytesIO(data), encoding=None).read()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m chaos.zygote SOCKET CWD", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(sys.argv[1], sys.argv[2]))
