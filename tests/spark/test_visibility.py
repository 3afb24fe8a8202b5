"""Visibility of each write on each other node, per-write convergence, the PBS curve and lag quantiles."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_analytics import events, visibility
from spark_analytics.readers import find_log_files, read_logs
from tests.spark.conftest import events_of
from tests.spark.logs import apply, pkey, rid, ts, write, write_logs

LINES = [
    # key a: n1 writes version 1 at 0; n2 applies it at 10; n3 never applies it but writes version 2 at 50;
    # n1 applies version 2 at 80, n2 never does.
    write("n1", 0, "a", 1), apply("n2", 10, "a", "n1", 1), write("n3", 50, "a", 1), apply("n1", 80, "a", "n3", 1),
    # key b: n2 writes version 1 at 100 and version 2 at 200; n3's clock applies version 2 at 190 (before it was
    # written: the lag counts as 0).
    write("n2", 100, "b", 1), apply("n1", 100.5, "b", "n2", 1), apply("n3", 130, "b", "n2", 1),
    write("n2", 200, "b", 2), apply("n1", 205, "b", "n2", 2), apply("n3", 190, "b", "n2", 2),
    # key c: n1 writes versions 1 and 2 at 300 and 310; n2 only ever applies version 2 (at 320); n3 both.
    write("n1", 300, "c", 2), write("n1", 310, "c", 3), apply("n2", 320, "c", "n1", 3),
    apply("n3", 305, "c", "n1", 2), apply("n3", 330, "c", "n1", 3),
    # an apply of a dot whose write is not in the logs
    apply("n2", 400, "d", "n1", 9),
    # key e: n1 puts at 500 (n2 applies it at 510) and deletes at 600 (n2 at 605); n3 logs nothing of e: it holds
    # the delete (nothing) from 600 on
    write("n1", 500, "e", 4), apply("n2", 510, "e", "n1", 4), write("n1", 600, "e", 5, op="delete"),
    apply("n2", 605, "e", "n1", 5),
    # key f: the same, but n3 held the put (706): a delete it never logged is never visible there
    write("n1", 700, "f", 6), apply("n2", 705, "f", "n1", 6), apply("n3", 706, "f", "n1", 6),
    write("n1", 800, "f", 7, op="delete"), apply("n2", 805, "f", "n1", 7),
]

# (key, version, write ms, target, visible ms or None)
EXPECTED = [
    ("a", 1, 0, "n2", 10), ("a", 1, 0, "n3", 50),          # n1's write
    ("a", 2, 50, "n1", 80), ("a", 2, 50, "n2", None),      # n3's
    ("b", 1, 100, "n1", 100.5), ("b", 1, 100, "n3", 130),
    ("b", 2, 200, "n1", 205), ("b", 2, 200, "n3", 190),
    ("c", 1, 300, "n2", 320), ("c", 1, 300, "n3", 305),
    ("c", 2, 310, "n2", 320), ("c", 2, 310, "n3", 330),
    ("e", 1, 500, "n2", 510), ("e", 1, 500, "n3", 600),
    ("e", 2, 600, "n2", 605), ("e", 2, 600, "n3", 600),
    ("f", 1, 700, "n2", 705), ("f", 1, 700, "n3", 706),
    ("f", 2, 800, "n2", 805), ("f", 2, 800, "n3", None),
]


NODES = ["n1", "n2", "n3"]


@pytest.fixture(scope="module")
def tables(spark: SparkSession) -> dict[str, DataFrame]:
    ev = events_of(spark, LINES)
    ranked = visibility.rank_writes(events.writes(ev)).cache()
    applied = visibility.applied_versions(events.applies(ev), ranked)
    versions = visibility.version_visibility(visibility.holdings(ranked, applied), NODES).cache()
    vis = visibility.visibility(visibility.holdings(ranked, applied), NODES).cache()
    return {"ev": ev, "ranked": ranked, "versions": versions, "vis": vis}


def test_rank_writes_orders_by_hlc_and_drops_repeated_dots(spark: SparkSession) -> None:
    lines = [write("n1", 0, "k", 1, hlc_ms=30), write("n2", 10, "k", 1, hlc_ms=20),
             write("n2", 10, "k", 1, hlc_ms=20),  # the same line twice
             write("n3", 20, "k", 1, hlc_ms=20, logical=1)]
    ranked = visibility.rank_writes(events.writes(events_of(spark, lines)))
    assertDataFrameEqual(
        ranked.select("dot_node", "version"),
        [Row(dot_node=rid("n2"), version=1), Row(dot_node=rid("n3"), version=2), Row(dot_node=rid("n1"), version=3)],
    )


def test_equal_hlc_stamps_are_ordered_by_the_dot_not_its_hash(spark: SparkSession, tmp_path: Path) -> None:
    """docs/analytics.md: versions are ordered by hlc stamp, then dot. The report hashes replica ids; the order of
    two writes with the same stamp must still be the order of their dots as written."""
    names = [f"n1@127.0.0.11#{i}" for i in range(1, 40)]
    hashes = {r["name"]: r["h"] for r in spark.createDataFrame([(n,) for n in names], "name string")
              .select("name", F.xxhash64("name").alias("h")).collect()}
    # two replica ids whose hashes are in the opposite order of the ids: a hash order would swap the versions
    low, high = next((a, b) for a in names for b in names if a < b and hashes[a] > hashes[b])
    lines = []
    for dot_node in (high, low):  # the same stamp (a node restarted with a new incarnation, same clock reading)
        line = write("n1", 10, "k", 1, hlc_ms=5)
        line["dot"], line["hlc"][2] = [dot_node, 1], "n1@127.0.0.11"
        lines.append(line)
    raw = read_logs(spark, find_log_files(write_logs(tmp_path, lines)))
    for ev in (events.for_report(raw), raw.transform(events.normalize)):
        ranked = visibility.rank_writes(events.writes(ev)).orderBy("version").collect()
        assert [r["version"] for r in ranked] == [1, 2]
        by_version = [r["dot_node"] for r in ranked]
        expected = [low, high] if "extra" not in ev.columns else [hashes[low], hashes[high]]
        assert by_version == expected


def test_visibility_pairs(tables: dict[str, DataFrame]) -> None:
    assertDataFrameEqual(
        tables["vis"],
        [
            Row(pkey=pkey(k), version=v, write_ts=ts(at), target=t, visible_ts=None if seen is None else ts(seen),
                lag_ms=None if seen is None else float(max(seen - at, 0)))
            for k, v, at, t, seen in EXPECTED
        ],
    )


# Issue 17: a delete that reaches a node whose newest version is already a delete is not logged there.
DELETES = [
    # key g: n1 puts (n2 at 910, n3 at 905) and deletes at 1000 (n2 1005, n3 1003); n2 deletes again at 1100:
    # n1 and n3 had deleted g already and log nothing
    write("n1", 900, "g", 1), apply("n2", 910, "g", "n1", 1), apply("n3", 905, "g", "n1", 1),
    write("n1", 1000, "g", 2, op="delete"), apply("n2", 1005, "g", "n1", 2), apply("n3", 1003, "g", "n1", 2),
    write("n2", 1100, "g", 1, op="delete"),
    # key h: the same, but n3 gets n1's delete only at 1500, after n2's second delete (1400)
    write("n1", 1200, "h", 3), apply("n2", 1205, "h", "n1", 3), apply("n3", 1206, "h", "n1", 3),
    write("n1", 1300, "h", 4, op="delete"), apply("n2", 1305, "h", "n1", 4), apply("n3", 1500, "h", "n1", 4),
    write("n2", 1400, "h", 2, op="delete"),
    # key i: n3 held a put after its delete: a later delete reaching it changes something and would be logged
    write("n1", 1600, "i", 5), apply("n3", 1601, "i", "n1", 5), write("n1", 1700, "i", 6, op="delete"),
    apply("n3", 1701, "i", "n1", 6), write("n2", 1800, "i", 3), apply("n3", 1801, "i", "n2", 3),
    write("n1", 1900, "i", 7, op="delete"), apply("n2", 1800, "i", "n1", 5),
]


def test_a_delete_after_a_delete_is_held_without_a_log_line(spark: SparkSession) -> None:
    ev = events_of(spark, DELETES)
    ranked = visibility.rank_writes(events.writes(ev))
    applied = visibility.applied_versions(events.applies(ev), ranked)
    versions = visibility.version_visibility(visibility.holdings(ranked, applied), NODES)
    got = {(r["pkey"], r["version"]): [None if v is None else (v - ts(0)) / 1e6 for v in r["visible_ts"]]
           for r in versions.collect()}
    assert got[pkey("g"), 3] == [1100, 1100, 1100]  # n1 and n3 hold n2's delete from its write
    assert got[pkey("h"), 3] == [1400, 1400, 1500]  # n3 from its own (late) delete
    assert got[pkey("h"), 2] == [1300, 1305, 1500]
    # i: n3's newest before n1's last delete is n2's put (1801): that delete never reached n3
    assert got[pkey("i"), 4] == [1900, None, None]


def test_unmatched_applies(spark: SparkSession, tables: dict[str, DataFrame]) -> None:
    got = visibility.unmatched_applies(events.applies(tables["ev"]), tables["ranked"])
    assertDataFrameEqual(got.select("node", "pkey", "dot_counter"), [Row(node="n2", pkey=pkey("d"), dot_counter=9)])


def test_write_convergence(tables: dict[str, DataFrame]) -> None:
    got = visibility.write_convergence(tables["versions"], NODES)
    assertDataFrameEqual(
        got.select("pkey", "version", "writer", "targets", "visible_on", "converged_ts"),
        [
            Row(pkey=pkey("a"), version=1, writer="n1", targets=2, visible_on=2, converged_ts=ts(50)),
            Row(pkey=pkey("a"), version=2, writer="n3", targets=2, visible_on=1, converged_ts=None),
            Row(pkey=pkey("b"), version=1, writer="n2", targets=2, visible_on=2, converged_ts=ts(130)),
            Row(pkey=pkey("b"), version=2, writer="n2", targets=2, visible_on=2, converged_ts=ts(205)),
            Row(pkey=pkey("c"), version=1, writer="n1", targets=2, visible_on=2, converged_ts=ts(320)),
            Row(pkey=pkey("c"), version=2, writer="n1", targets=2, visible_on=2, converged_ts=ts(330)),
            Row(pkey=pkey("e"), version=1, writer="n1", targets=2, visible_on=2, converged_ts=ts(600)),
            Row(pkey=pkey("e"), version=2, writer="n1", targets=2, visible_on=2, converged_ts=ts(605)),
            Row(pkey=pkey("f"), version=1, writer="n1", targets=2, visible_on=2, converged_ts=ts(706)),
            Row(pkey=pkey("f"), version=2, writer="n1", targets=2, visible_on=1, converged_ts=None),
        ],
    )


def test_write_convergence_on_one_node(spark: SparkSession) -> None:
    ranked = visibility.rank_writes(events.writes(events_of(spark, [write("n1", 0, "a", 1)])))
    no_applies = ranked.limit(0).select("pkey", "node", "version", "ts")
    versions = visibility.version_visibility(visibility.holdings(ranked, no_applies), ["n1"])
    got = visibility.write_convergence(versions, ["n1"])
    assertDataFrameEqual(got.select("targets", "converged_ts"), [Row(targets=0, converged_ts=ts(0))])


LAGS = [("normal", 0.0), ("normal", 3.0), ("normal", 10.0), ("normal", 40.0), ("normal", None),
        ("partition", 5.0), ("partition", 5000.0), ("partition", None), ("partition", None)]


def test_pbs_curve(spark: SparkSession) -> None:
    vis = spark.createDataFrame(LAGS, "phase string, lag_ms double")
    got = visibility.lag_figures(vis, deltas_ms=(0, 5, 100, 10_000))
    assert {phase: (f["pairs"], f["fractions"]) for phase, f in got.items()} == {
        "normal": (5, [1 / 5, 2 / 5, 4 / 5, 4 / 5]),
        "partition": (4, [0.0, 1 / 4, 1 / 4, 2 / 4]),
        "all": (9, [1 / 9, 3 / 9, 5 / 9, 6 / 9]),
    }


def test_lag_quantiles(spark: SparkSession) -> None:
    vis = spark.createDataFrame(LAGS, "phase string, lag_ms double")
    got = visibility.lag_figures(vis)
    assert {phase: {k: v for k, v in f.items() if k != "fractions"} for phase, f in got.items()} == {
        "normal": dict(pairs=5, visible=4, visible_fraction=0.8, p50_ms=3.0, p99_ms=40.0, p99_9_ms=40.0, max_ms=40.0),
        "partition": dict(pairs=4, visible=2, visible_fraction=0.5, p50_ms=5.0, p99_ms=5000.0, p99_9_ms=5000.0,
                          max_ms=5000.0),
        "all": dict(pairs=9, visible=6, visible_fraction=6 / 9, p50_ms=5.0, p99_ms=5000.0, p99_9_ms=5000.0,
                    max_ms=5000.0),
    }


def test_lag_quantiles_are_exact_ranks_within_histogram_cells(spark: SparkSession) -> None:
    """Many lags in few histogram cells (ties, zeros, values on both sides of a Δ and of a cell's edge): each
    quantile is the lag of rank ⌈q·n⌉ in sorted order, per phase and over all, and the PBS counts are exact."""
    rng = random.Random(7)
    lags = [("normal", round(rng.lognormvariate(1.5, 0.6), 3)) for _ in range(3_000)]
    lags += [("normal", 0.0)] * 40 + [("normal", 5.0)] * 30 + [("normal", None)] * 25
    lags += [("partition", round(rng.uniform(0, 20_000), 1)) for _ in range(700)] + [("partition", 4.9999)] * 3
    vis = spark.createDataFrame(lags, "phase string, lag_ms double")
    deltas = (0, 1, 2, 5, 10, 100, 10_000)
    got = visibility.lag_figures(vis, deltas_ms=deltas, quantiles=(0.001, 0.5, 0.9, 0.99, 0.999, 1.0))
    for phase in ("normal", "partition", "all"):
        values = [lag for p, lag in lags if phase in (p, "all")]
        seen = sorted(v for v in values if v is not None)
        assert got[phase]["pairs"] == len(values) and got[phase]["visible"] == len(seen)
        assert got[phase]["fractions"] == [sum(1 for v in seen if v <= d) / len(values) for d in deltas]
        assert got[phase]["max_ms"] == seen[-1]
        for q in (0.001, 0.5, 0.9, 0.99, 0.999, 1.0):
            name = "p" + f"{q * 100:g}".replace(".", "_") + "_ms"
            assert got[phase][name] == seen[max(1, math.ceil(q * len(seen))) - 1], (phase, q)


def test_lag_figures_without_visible_pairs(spark: SparkSession) -> None:
    vis = spark.createDataFrame([("normal", None), ("normal", None)], "phase string, lag_ms double")
    got = visibility.lag_figures(vis, deltas_ms=(0, 5))
    assert got == {phase: dict(pairs=2, fractions=[0.0, 0.0], visible=0, visible_fraction=0.0, p50_ms=None,
                               p99_ms=None, p99_9_ms=None, max_ms=None) for phase in ("normal", "all")}


def test_version_visibility_and_newer_ts(tables: dict[str, DataFrame]) -> None:
    """One row per write with the moment each node held it (the writer's own element is its write)."""
    def at(ms: float | None) -> int | None:
        return None if ms is None else ts(ms)

    assertDataFrameEqual(
        tables["versions"].select("pkey", "version", "writer", "write_ts", "visible_ts"),
        [
            Row(pkey=pkey("a"), version=1, writer="n1", write_ts=ts(0), visible_ts=[at(0), at(10), at(50)]),
            Row(pkey=pkey("a"), version=2, writer="n3", write_ts=ts(50), visible_ts=[at(80), None, at(50)]),
            Row(pkey=pkey("b"), version=1, writer="n2", write_ts=ts(100), visible_ts=[at(100.5), at(100), at(130)]),
            Row(pkey=pkey("b"), version=2, writer="n2", write_ts=ts(200), visible_ts=[at(205), at(200), at(190)]),
            Row(pkey=pkey("c"), version=1, writer="n1", write_ts=ts(300), visible_ts=[at(300), at(320), at(305)]),
            Row(pkey=pkey("c"), version=2, writer="n1", write_ts=ts(310), visible_ts=[at(310), at(320), at(330)]),
            Row(pkey=pkey("e"), version=1, writer="n1", write_ts=ts(500), visible_ts=[at(500), at(510), at(600)]),
            Row(pkey=pkey("e"), version=2, writer="n1", write_ts=ts(600), visible_ts=[at(600), at(605), at(600)]),
            Row(pkey=pkey("f"), version=1, writer="n1", write_ts=ts(700), visible_ts=[at(700), at(705), at(706)]),
            Row(pkey=pkey("f"), version=2, writer="n1", write_ts=ts(800), visible_ts=[at(800), at(805), None]),
        ],
    )
    assertDataFrameEqual(
        tables["ranked"].select("pkey", "version", "newer_ts"),
        [Row(pkey=pkey(k), version=v, newer_ts=None if n is None else ts(n)) for k, v, n in [
            ("a", 1, 50), ("a", 2, None), ("b", 1, 200), ("b", 2, None), ("c", 1, 310), ("c", 2, None),
            ("e", 1, 600), ("e", 2, None), ("f", 1, 800), ("f", 2, None),
        ]],
    )


def test_write_figures(spark: SparkSession) -> None:
    conv = spark.createDataFrame(
        [("normal", 1, False), ("normal", None, True), ("partition", None, False), ("partition", None, False)],
        "phase string, converged_ts long, writeback boolean",
    )
    assertDataFrameEqual(
        visibility.write_figures(conv),
        [Row(phase="normal", writes=2, never_converged=1, writebacks=1),
         Row(phase="partition", writes=2, never_converged=2, writebacks=0)],
    )
