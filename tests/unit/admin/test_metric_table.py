"""Every counter the node keeps is published: vmqpy is read with `ast` for each counter key written (a `+=` or an
`=` on a subscript of `metrics`, `counters`, `stats`, ...; the keys of those dicts' literals and of `stats()`'s
dicts, and `NodeFacade.metrics()`'s own keys) and each key must be read by a row of the metric table
(admin.metric_table: `SPECS`, `PATTERNS`, `HISTOGRAMS`), under the dotted prefix `NodeFacade.metrics()` gives that
file's counters (`PREFIXES`). A key no row reads
fails the test with its file and line: add a row to the table (VerneMQ's name where VerneMQ has the metric,
else `vmqpy_<area>_<what>`), and the counter is exported at 0 from the node's start."""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from admin.metric_table import HISTOGRAMS, INACTIVE_SESSIONS, PATTERNS, SPECS
from admin.prometheus import exposed_names, families
from vmqpy.broker.driver.connection import RECEIVED_COUNTERS
from vmqpy.client_metrics import SENT_COUNTERS
from vmqpy.cluster.link_counters import LinkCounters

ROOT = Path(__file__).resolve().parents[3]

#: the objects that hold counters: a subscript written on one of these names is a counter key
HOLDERS = frozenset({"metrics", "_metrics", "counters", "_counters", "stats", "_stats", "out", "counter"})

#: where each file's counters appear in `NodeFacade.metrics()` (vmqpy/facade.py): the first matching path prefix;
#: a file that writes counters and matches none fails `test_every_counter_file_has_a_prefix`
PREFIXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vmqpy/broker/", ("broker.",)),
    ("vmqpy/node_tick.py", ("broker.",)),
    # the publishes' forwarding driver: the cluster's (stats()) and the queue replicas' transport (replicas/service)
    ("vmqpy/cluster/forward_driver.py", ("cluster.", "queue_replica.transport_")),
    ("vmqpy/cluster/service.py", ("cluster.",)),
    ("vmqpy/cluster/registration.py", ("registration.",)),
    ("vmqpy/cluster/transfer.py", ("registration.",)),
    ("vmqpy/cluster/tcp.py", ("cluster.links.",)),
    ("vmqpy/cluster/memory_links.py", ("cluster.links.",)),
    ("vmqpy/metadata/", ("metadata.",)),
    ("vmqpy/replicas/", ("queue_replica.",)),
    ("vmqpy/storage.py", ("storage.",)),
    ("vmqpy/gc_watch.py", ("process.",)),
    ("vmqpy/facade.py", ("",)),  # NodeFacade.metrics() itself: its keys are dotted already
)

#: counter writes whose key the scan cannot name, with where their keys are checked instead
DYNAMIC: dict[tuple[str, str], str] = {
    # the histograms' bucket keys: `HISTOGRAMS` (their bounds: tests/unit/admin/test_prometheus.py)
    ("vmqpy/client_metrics.py", "counter[self.keys[bisect_left(self.bounds, us)]]"): "histogram buckets",
    ("vmqpy/client_metrics.py", "counter[self.sum_key]"): "histogram sums",
    # DELIVERY_LATENCY.observe_ns written out in the compiled driver: the same bucket and sum keys
    ("vmqpy/broker/driver/connection.py", "metrics[_DELIVERY_KEYS[bisect_left(_DELIVERY_BOUNDS, us)]]"):
        "histogram buckets",
    ("vmqpy/broker/driver/connection.py", "metrics[_DELIVERY_SUM]"): "histogram sums",
    # the packet counters `mqtt_<packet>_received` / `_sent`, by packet type: test_every_packet_counter_is_published
    ("vmqpy/broker/driver/connection.py", "self.broker.metrics[counter]"): "RECEIVED_COUNTERS",
    ("vmqpy/broker/driver/connection.py", "self.broker.metrics[sent]"): "vmqpy.client_metrics.SENT_COUNTERS",
    # the attribute holds one of the module's `..._METRIC` constants (read as keys below)
    ("vmqpy/broker/listeners/listener_limit.py", "self.metrics[self.metric]"): "the module's _METRIC constants",
    ("vmqpy/broker/listeners/listener_limit.py", "metrics[metric]"): "the module's _METRIC constants",
    ("vmqpy/broker/listeners/preludes.py", "self.metrics[self.metric]"): "the module's _METRIC constants",
    ("vmqpy/broker/listeners/address_limit.py", "self.metrics[metric]"): "the module's _METRIC constants",
    # keyed by a peer, an address or a row: not counters of the node
    ("vmqpy/metadata/rows.py", "counters[counter]"): "a dump's per-row counts",
    ("vmqpy/broker/listeners/address_limit.py", "counter[address]"): "connections per client address",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Write:
    """One counter key written in vmqpy (`pattern`: a regular expression when the key is an f-string)."""

    path: str
    line: int
    key: str
    pattern: bool = False

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _holder(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _constants(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """A module's top-level names bound to a string or a tuple of strings (and of such names)."""
    out: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and value is not None:
            keys = _literal(value, out)
            if keys is not None:
                out[target.id] = keys
    return out


def _literal(node: ast.expr, names: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.IfExp):
        a, b = _literal(node.body, names), _literal(node.orelse, names)
        return None if a is None or b is None else a + b
    if isinstance(node, ast.Starred):
        return _literal(node.value, names)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        out: list[str] = []
        for element in node.elts:
            keys = _literal(element, names)
            if keys is None:
                return None
            out.extend(keys)
        return tuple(out)
    return None


def _loop_keys(tree: ast.Module, names: dict[str, tuple[str, ...]]) -> dict[tuple[int, str], tuple[str, ...]]:
    """(line, name) of every subscript inside a `for NAME in <literal strings>` loop -> the loop's strings."""
    out: dict[tuple[int, str], tuple[str, ...]] = {}
    for loop in ast.walk(tree):
        if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name):
            keys = _literal(loop.iter, names)
            if keys is None:
                continue
            for inner in ast.walk(loop):
                if isinstance(inner, ast.Subscript):
                    out[(inner.lineno, loop.target.id)] = keys
    return out


def _pattern(node: ast.JoinedStr) -> str:
    parts = [re.escape(str(v.value)) if isinstance(v, ast.Constant) else r"\w+" for v in node.values]
    return "".join(parts)


def _stats_keys(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """The string keys of dict literals in a `stats()` method and of the `{...}` assigned to a counters holder."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "stats":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict):
                    yield from ((k.lineno, k.value) for k in inner.keys
                                if isinstance(k, ast.Constant) and isinstance(k.value, str))
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_holder(t) in HOLDERS for t in targets):
                yield from ((k.lineno, k.value) for k in node.value.keys
                            if isinstance(k, ast.Constant) and isinstance(k.value, str))


@functools.cache
def scan() -> tuple[list[Write], list[tuple[str, int, str]]]:
    """Every counter key written in vmqpy, and the writes whose key could not be named (path, line, expression)."""
    trees = {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
             for p in sorted((ROOT / "vmqpy").rglob("*.py"))}
    every: dict[str, tuple[str, ...]] = {}
    for tree in trees.values():
        for name, values in _constants(tree).items():
            every[name] = every.get(name, ()) + values
    writes: list[Write] = []
    unnamed: list[tuple[str, int, str]] = []
    for path, tree in trees.items():
        names = {**every, **_constants(tree)}
        loops = _loop_keys(tree, names)
        for node in ast.walk(tree):
            target: ast.expr | None = None
            if isinstance(node, ast.AugAssign):
                target = node.target
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            if not isinstance(node, ast.stmt) or not isinstance(target, ast.Subscript) \
                    or _holder(target.value) not in HOLDERS:
                continue
            key = target.slice
            if _holder(target.value) == "out" and not _in_stats(tree, node):
                continue  # a local dict named `out` outside stats() and metrics(): not a counter
            if isinstance(key, ast.JoinedStr):
                writes.append(Write(path, node.lineno, _pattern(key), pattern=True))
                continue
            keys = _literal(key, names)
            if keys is None and isinstance(key, ast.Name):
                keys = loops.get((target.lineno, key.id))
            if keys is None:
                unnamed.append((path, node.lineno, ast.unparse(target)))
                continue
            writes.extend(Write(path, node.lineno, k) for k in keys)
        writes.extend(Write(path, line, key) for line, key in _stats_keys(tree))
        writes.extend(Write(path, 0, value) for name, values in _constants(tree).items()
                      if name.endswith("METRIC") for value in values)
    return writes, unnamed


def _in_stats(tree: ast.Module, node: ast.AST) -> bool:
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name in ("stats", "metrics") and any(n is node for n in ast.walk(fn)):
            return True
    return False


def _prefixes(path: str) -> tuple[str, ...] | None:
    for start, prefixes in PREFIXES:
        if path.startswith(start):
            return prefixes
    return None


def table_reads(key: str) -> bool:
    """Whether a row of the table reads the node key `key` (dotted, as `NodeFacade.metrics()` gives it)."""
    if any(key in spec.sources for spec in SPECS) or key in INACTIVE_SESSIONS[2:]:
        return True
    if any(pattern.fullmatch(key) for _name, _help, pattern, _label, _values in PATTERNS):
        return True
    return any(key.startswith(h.source + "_") for h in HISTOGRAMS)


def published(write: Write, prefix: str) -> bool:
    """Whether the table reads what `write` makes under `prefix`: its key, or for an f-string key a sample of its
    shape (a pattern family reads every key of its shape) or every row's key of that shape."""
    if not write.pattern:
        return table_reads(prefix + write.key)
    sample = re.sub(r"\\(.)", r"\1", write.key.replace(r"\w+", "x"))  # the regular expression's text, unescaped
    if table_reads(prefix + sample):
        return True
    shape = re.compile(re.escape(prefix) + write.key)
    return any(shape.fullmatch(source) for spec in SPECS for source in spec.sources)


def unpublished(writes: list[Write]) -> list[str]:
    """`file:line: key` of each write whose key no row of the table reads."""
    missing: list[str] = []
    for write in writes:
        for prefix in _prefixes(write.path) or ():  # a file without one: test_every_counter_file_has_a_prefix
            if not published(write, prefix):
                missing.append(f"{write.where()}: {prefix}{write.key}")
    return sorted(set(missing))


def test_every_counter_written_in_vmqpy_is_published() -> None:
    missing = unpublished(scan()[0])
    assert not missing, "counters no row of admin.metric_table reads (add a row):\n" + "\n".join(missing)


def test_the_check_names_a_counter_whose_row_is_taken_out(monkeypatch: pytest.MonkeyPatch) -> None:
    writes = scan()[0]
    monkeypatch.setattr(sys.modules[__name__], "SPECS", tuple(s for s in SPECS if s.name != "vmqpy_loop_stalls"))
    assert unpublished(writes) == ["vmqpy/node_tick.py:" + str(next(w.line for w in writes if w.key == "loop_stalls"))
                                   + ": broker.loop_stalls"]


def test_every_packet_counter_is_published() -> None:
    """The driver counts packets by type from two tables (received, sent): each of their keys has its row."""
    keys = [*RECEIVED_COUNTERS.values(), *SENT_COUNTERS.values()]
    assert keys and [k for k in keys if not table_reads("broker." + k)] == []


def test_every_link_counter_is_published() -> None:
    missing = [f"cluster.links.{f.name}" for f in dataclasses.fields(LinkCounters)
               if not table_reads(f"cluster.links.{f.name}")]
    assert not missing, "vmqpy/cluster/link_counters.py: counters no row reads: " + ", ".join(missing)


def test_every_counter_file_has_a_prefix() -> None:
    writes, _ = scan()
    unplaced = sorted({w.where() for w in writes if _prefixes(w.path) is None and w.path != "vmqpy/client_metrics.py"})
    assert not unplaced, "counters in files PREFIXES does not place (where does NodeFacade.metrics() put them?):\n" \
        + "\n".join(unplaced)


def test_every_unnamed_counter_write_is_accounted_for() -> None:
    _, unnamed = scan()
    unknown = [f"{path}:{line}: {expr}" for path, line, expr in unnamed if (path, expr) not in DYNAMIC]
    assert not unknown, "counter writes whose key the scan cannot name (name it, or add it to DYNAMIC):\n" \
        + "\n".join(unknown)
    seen = {(path, expr) for path, _line, expr in unnamed}
    assert set(DYNAMIC) <= seen, f"DYNAMIC entries no longer in the code: {sorted(set(DYNAMIC) - seen)}"


def test_the_scan_finds_known_counters() -> None:
    """The scan is not blind: counters of each kind of site are among its finds."""
    writes, _ = scan()
    found = {(w.path, w.key) for w in writes}
    for expected in [("vmqpy/broker/core/broker.py", "publish_received"),  # self.metrics["..."] += 1
                     ("vmqpy/broker/driver/linger.py", "socket_linger_cut"),  # a constant of the module
                     ("vmqpy/broker/core/broker.py", "queue_overflow_kept"),  # a loop over a tuple constant
                     ("vmqpy/cluster/registration.py", "handovers_in_progress"),  # stats()'s out[...] = ...
                     ("vmqpy/replicas/owner.py", "operations_pending"),  # stats()'s dict literal
                     ("vmqpy/metadata/replica.py", "gc_runs"),
                     ("vmqpy/facade.py", "broker.subscriptions_sweeping"),  # NodeFacade.metrics()'s own keys
                     ("vmqpy/broker/core/forwards.py", "forward_delivered")]:
        assert expected in found, expected


def test_every_counter_row_is_exported_at_0_before_its_first_event() -> None:
    """A node that reported nothing yet shows every counter row, with its labels, at 0 (`/metrics`,
    `vmq-admin metrics show`), so `increase()` sees the first event."""
    fresh = {(f.name, labels): value for f in families({}) for labels, value in f.samples}
    for spec in SPECS:
        if spec.kind == "counter":
            assert fresh.get((spec.name, spec.labels)) == 0.0, (spec.name, spec.labels)
    assert {spec.name for spec in SPECS if spec.kind == "counter"} <= {n.removesuffix("_total")
                                                                        for n in exposed_names({})}


def test_the_rows_of_a_family_agree_on_its_kind_and_label_names() -> None:
    """Rows of one family (one name, several label values) make one family of one type with one set of labels."""
    seen: dict[str, tuple[str, tuple[str, ...]]] = {}
    for spec in SPECS:
        shape = (spec.kind, tuple(label for label, _ in spec.labels))
        assert seen.setdefault(spec.name, shape) == shape, spec.name
