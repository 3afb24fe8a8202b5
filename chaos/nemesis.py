"""The nemesis: carries out the steps of a schedule on the cluster and the network backend, on time, and records
each step in the history (process `nemesis`, f `nemesis`, ignored by the contract's readers)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterable
from typing import Protocol

from chaos import owner_loss
from chaos.cluster import Cluster, HarnessError, Node
from chaos.haproxy import Balancer
from chaos.history import Recorder
from chaos.schedule import Step


class Network(Protocol):
    name: str

    def setup(self) -> None: ...

    def cut(self, pairs: Iterable[tuple[int, int]]) -> None: ...

    def heal(self) -> None: ...

    def teardown(self) -> None: ...


#: `vmq-admin node drain` of a rolling restart: clients told to go per second, and how long the drain may take.
DRAIN_RATE = 50
DRAIN_TIMEOUT_S = 30
#: How long a restarted node may take to be ready in every member's view, and HAProxy to take it back.
REJOIN_DEADLINE_S = 60.0


class Nemesis:
    def __init__(self, cluster: Cluster, network: Network, recorder: Recorder, steps: list[Step],
                 balancer: Balancer | None = None) -> None:
        self.cluster = cluster
        self.balancer = balancer  # HAProxy in front of the cluster (a roll waits until it has the node back)
        self.network = network
        self.recorder = recorder
        self.steps = steps
        self.done: list[str] = []
        self.heals: list[int] = []  # harness times (ns) when a fault ended (see step)
        self.faults: list[int] = []  # harness times (ns) when a fault began
        self.current = "healthy"
        self.errors: list[str] = []
        self.left: set[str] = set()  # nodes a churn step made leave and that did not join again yet
        self.lost: list[Node] = []  # nodes an owner-loss step killed with their disk, not yet removed
        self.removed: list[Node] = []  # lost nodes removed with leave -k; an empty node joins at the end
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()  # every step carried out (or the nemesis stopped)

    def start(self, t0: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(t0,), name="nemesis", daemon=True)
        self._thread.start()

    def _run(self, t0: float) -> None:
        try:
            for step in self.steps:
                if self._stop.wait(max(0.0, t0 + step.at - time.monotonic())):
                    return
                self.apply(step)
        finally:
            self._finished.set()

    def wait_done(self, timeout_s: float) -> bool:
        """Until every step was carried out (a rolling restart runs past its planned times when a node is slow
        to come back); False at the timeout."""
        return self._finished.wait(timeout_s)

    def apply(self, step: Step) -> None:
        names = self.cluster.names
        text = step.describe(names)
        self.recorder.record("invoke", "nemesis", "nemesis", {"step": text}, "")
        began = time.time_ns()
        try:
            self._apply(step)
        except (HarnessError, OSError) as exc:
            self.errors.append(f"{text}: {exc}")
            self.recorder.record("info", "nemesis", "nemesis", {"step": text, "error": str(exc)}, "")
            return
        self.recorder.record("ok", "nemesis", "nemesis", {"step": text}, "")
        self.done.append(text)
        if step.action in ("heal", "resume", "unskew"):  # in force as soon as the step begins to undo it
            self.heals.append(began)
            self.current = "healthy"
        elif step.action in ("restart", "join", "replace"):  # in force once the node is up again
            self.heals.append(time.time_ns())
            self.current = "healthy"
        elif step.action == "roll":  # a fault from its drain until the node is back
            self.faults.append(began)
            self.heals.append(time.time_ns())
            self.current = "healthy"
        else:
            self.faults.append(began)
            self.current = text

    def _apply(self, step: Step) -> None:
        node = self.cluster.nodes[step.node] if step.node is not None else None
        if step.action == "cut":
            self.network.cut(step.cut)
        elif step.action == "heal":
            self.network.heal()
        elif step.action == "lose":
            self._lose()
        elif step.action == "replace":
            self._replace()
        elif node is None:
            raise HarnessError(f"step {step.action} names no node")
        elif step.action == "kill":
            node.kill9()
        elif step.action == "restart":
            node.start()
        elif step.action == "pause":
            node.pause()
        elif step.action == "resume":
            node.resume()
        elif step.action == "skew":
            node.skew(step.skew_s)
        elif step.action == "unskew":
            node.skew(0)
        elif step.action == "roll":
            self.current = step.describe(self.cluster.names)
            self._roll(node)
        elif step.action in ("leave", "join"):
            if step.other is None:
                raise HarnessError(f"step {step.action} names no other node")
            other = self.cluster.nodes[step.other]
            if step.action == "leave":
                self._leave(node, other)
            else:
                self._join(node, other)

    def _lose(self) -> None:
        """Owner loss (chaos/owner_loss.py): the node with the most persistent sessions killed, its disk deleted;
        which node, and the counts it was chosen by, are recorded in the history."""
        victim, counts = owner_loss.lose(self.cluster)
        self.lost.append(victim)
        chosen = {name: {"persistent_sessions": s, "queued": q} for name, (s, q) in sorted(counts.items())}
        self.recorder.record("info", "nemesis", "nemesis", {"step": f"lost {victim.name}", "sessions": chosen}, "")

    def _replace(self) -> None:
        """Every lost node removed with `cluster leave -k` on a survivor; its replacement (an empty node with its
        name) joins in `heal_everything`, once the workloads stopped: until its join it is a one-node cluster
        that would acknowledge publishes for subscribers it does not know."""
        if not self.lost:
            raise HarnessError("replace: no node was lost")
        while self.lost:
            victim = self.lost[0]
            said = owner_loss.remove(self.cluster, victim)
            self.lost.pop(0)
            self.removed.append(victim)
            self.recorder.record("info", "nemesis", "nemesis", {"step": f"removed {victim.name}", "leave": said},
                                 "")

    def _roll(self, node: Node) -> None:
        """One node of a rolling restart: `vmq-admin node drain` (HAProxy takes it out, its clients are told to
        go and reconnect to the others), `vmq-admin node stop` (a clean exit), start it again, wait until every
        member sees every member ready and HAProxy has it back in its pool."""
        drained = node.admin_cli("node", "drain", f"--rate={DRAIN_RATE}", f"--timeout={DRAIN_TIMEOUT_S}",
                                 timeout=DRAIN_TIMEOUT_S + 30)
        if drained.returncode != 0:
            raise HarnessError(f"drain of {node.name} failed: {(drained.stderr or drained.stdout).strip()[-300:]}")
        stopped = node.admin_cli("node", "stop", timeout=60)
        if stopped.returncode != 0:
            raise HarnessError(f"stop of {node.name} failed: {(stopped.stderr or stopped.stdout).strip()[-300:]}")
        proc = node.proc
        try:
            code = proc.wait(30) if proc is not None else 0
        except subprocess.TimeoutExpired:
            node.stop()
            raise HarnessError(f"{node.name} did not exit within 30 s of `node stop`") from None
        node.stop()  # forget the exited process (by PID)
        if code != 0:
            raise HarnessError(f"{node.name} exited with status {code} after `node stop`:\n{node.log_tail()}")
        node.start()
        if not self.cluster.wait_ready(REJOIN_DEADLINE_S):
            raise HarnessError(f"{node.name} not ready in every view {REJOIN_DEADLINE_S:.0f} s after its restart: "
                               f"{self.cluster.views()}")
        if self.balancer is not None:
            self.balancer.wait_status(node.short, up=True, deadline_s=REJOIN_DEADLINE_S)

    def _leave(self, node: Node, commander: Node) -> None:
        """`cluster leave -k`. A leave that cannot finish in its 8 s (a netsplit holds a handover up) is given
        up, and the node stays a member that serves (docs/cluster.md, "A leave that cannot finish"): that is
        recorded, and the run goes on; any other failure is the harness's."""
        answer = commander.admin_cli("cluster", "leave", f"node={node.name}", "-k", "-i", "1", "-t", "8",
                                     timeout=60)
        said = (answer.stderr or answer.stdout).strip()
        if answer.returncode != 0 and "gave the leave up" in said:
            self.recorder.record("info", "nemesis", "nemesis", {"step": f"leave of {node.name} given up",
                                                                "leave": said[-300:]}, "")
            return
        if answer.returncode != 0:
            raise HarnessError(f"leave failed: {said[-300:]}")
        self.left.add(node.name)

    def _join(self, node: Node, discovery: Node) -> None:
        answer = node.admin_cli("cluster", "join", f"discovery-node={discovery.discovery}", timeout=60)
        if answer.returncode != 0:
            raise HarnessError(f"join failed: {(answer.stderr or answer.stdout).strip()[-300:]}")
        self.left.discard(node.name)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def heal_everything(self) -> None:
        """Undo whatever is still in force: heal the network, resume, restart, unskew (the end of a run)."""
        began = time.time_ns()
        self.network.heal()
        try:
            if self.lost:  # an owner-loss step whose removal did not run: remove the node now
                self._replace()
            while self.removed:  # the replacement of every removed node joins
                owner_loss.rejoin(self.cluster, self.removed[0])
                self.recorder.record("info", "nemesis", "nemesis", {"step": f"rejoined {self.removed[0].name}"}, "")
                self.removed.pop(0)
        except HarnessError as exc:
            self.errors.append(f"replacement of a lost node at the end: {exc}")
        for node in self.cluster.nodes:
            if not node.owned:
                continue
            if node.paused:
                node.resume()
            if node.proc is None:
                node.start()
            if node.faketime_file.exists() and node.faketime_file.read_text().strip() not in ("+0", ""):
                node.skew(0)
        for node in self.cluster.nodes:
            if node.name in self.left:  # a churn step left it out: it joins again (through any other node)
                other = next(n for n in self.cluster.nodes if n is not node and n.name not in self.left)
                try:
                    self._join(node, other)
                except HarnessError as exc:
                    self.errors.append(f"join of {node.name} at the end: {exc}")
        if self.current != "healthy":
            self.heals.append(began)
            self.current = "healthy"
