"""Safety checks over a chaos history: lost, unexpected, duplicated, resurrected."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_analytics import safety
from spark_analytics.readers import read_history
from tests.spark.history import History


def test_operations_pair_invokes_with_completions(spark: SparkSession, tmp_path: Path) -> None:
    h = History()
    h.invoke("p1", "publish", {"topic": "t", "msg": "m1"})
    h.invoke("p2", "subscribe", {"client": "c", "filter": "f"})
    h.complete("p1", "publish", "ok", {"topic": "t", "msg": "m1"})
    h.publish("p1", "t", "m2", status="fail")
    h.invoke("p1", "publish", {"topic": "t", "msg": "m3"})  # p1 never completes it
    h.complete("p2", "subscribe", "info", None)
    ops = safety.operations(read_history(spark, h.write(tmp_path / "h.jsonl", extra=["{oops", '{"type":"ok"}'])))
    base = 1_000_000_000
    assertDataFrameEqual(
        ops.select("process", "f", "invoke_time", "complete_time", "status", F.col("value.msg").alias("msg")),
        [
            Row(process="p1", f="publish", invoke_time=base + 1_000_000, complete_time=base + 3_000_000, status="ok",
                msg="m1"),
            Row(process="p2", f="subscribe", invoke_time=base + 2_000_000, complete_time=None, status="info",
                msg=None),
            Row(process="p1", f="publish", invoke_time=base + 4_000_000, complete_time=base + 5_000_000,
                status="fail", msg="m2"),
            Row(process="p1", f="publish", invoke_time=base + 6_000_000, complete_time=None, status="info",
                msg="m3"),
        ],
    )
    statuses = {r["status"]: r["count"] for r in safety.history_status(read_history(spark, tmp_path / "h.jsonl"))
                .groupBy("status").count().collect()}
    assert statuses == {"ok": 7, "corrupt": 1, "missing_field": 1}


def violating_history() -> History:
    h = History()
    h.op("p3", "subscribe", {"client": "c1", "filter": "f/1"})
    h.op("p3", "subscribe", {"client": "c1", "filter": "f/2"})
    h.op("p3", "unsubscribe", {"client": "c1", "filter": "f/2"})       # f/2 comes back: resurrected
    h.op("p3", "subscribe", {"client": "c1", "filter": "f/3"})         # f/3 missing: lost
    h.op("p3", "subscribe", {"client": "c1", "filter": "f/4"}, status="none")  # unknown outcome, missing: fine
    h.publish("p1", "t/1", "m1", expect=["c1"])
    h.publish("p1", "t/1", "m2", expect=["c1"])                        # never received: lost
    h.publish("p1", "t/1", "m3", status="fail", expect=["c1"])
    h.publish("p1", "t/1", "m4", status="info", expect=["c1"])         # received: fine
    h.publish("p1", "t/2", "m5")                                       # nobody received it: lost
    h.publish("p1", "t/2", "m6")
    h.publish("p2", "r/1", "r1", retain=True, expect=[])
    h.publish("p2", "r/1", None, retain=True, expect=[])               # cleared, r1 comes back: resurrected
    h.publish("p2", "r/2", "r2", retain=True, expect=[])               # missing: lost
    h.publish("p2", "r/3", "r3a", retain=True, expect=[])
    h.publish("p2", "r/3", "r3b", retain=True, expect=[])              # r3a read back: lost (r3b is newer)
    h.publish("p2", "r/5", "r5", retain=True, expect=[])
    h.drain("c1", ["m1", "m1", "m4", "mX"])                            # m1 twice: duplicated; mX: unexpected
    h.drain("c2", ["m6"])
    h.read({"r/1": "r1", "r/3": "r3a", "r/4": "zz", "r/5": "r5", "r/6": None},  # r/4: unexpected
           {"c1": ["f/1", "f/2"], "c9": ["f/9"]})                      # c9 f/9: unexpected
    return h


def test_findings(spark: SparkSession, tmp_path: Path) -> None:
    ops = safety.operations(read_history(spark, violating_history().write(tmp_path / "h.jsonl")))
    found = [
        ("lost", "publish", '{"msg":"m2","topic":"t/1","client":"c1"}', 2),
        ("lost", "publish", '{"msg":"m5","topic":"t/2"}', 2),
        ("lost", "retained", '{"cell":"r/2"}', 2),
        ("lost", "retained", '{"cell":"r/3","observed":"r3a"}', 2),
        ("lost", "subscription", '{"cell":"[\\"c1\\",\\"f/3\\"]"}', 1),
        ("unexpected", "message", '{"msg":"mX"}', 1),
        ("unexpected", "retained", '{"cell":"r/4","observed":"zz"}', 1),
        ("unexpected", "subscription", '{"cell":"[\\"c9\\",\\"f/9\\"]","observed":"1"}', 1),
        ("duplicated", "delivery", '{"client":"c1","msg":"m1","times":2}', 1),
        ("resurrected", "retained", '{"cell":"r/1","observed":"r1"}', 1),
        ("resurrected", "subscription", '{"cell":"[\\"c1\\",\\"f/2\\"]","observed":"1"}', 1),
    ]
    assertDataFrameEqual(
        safety.finding_counts(safety.findings(ops), examples=10),
        [Row(check=c, what=w, detail=d, count=n) for c, w, d, n in found],
    )


def test_finding_counts_keep_the_first_examples(spark: SparkSession) -> None:
    found = spark.createDataFrame(
        [("lost", "publish", "b"), ("lost", "publish", "a"), ("lost", "publish", "c"), ("duplicated", "delivery", "x")],
        "check string, what string, detail string",
    )
    assertDataFrameEqual(
        safety.finding_counts(found, examples=2),
        [Row(check="lost", what="publish", detail="a", count=3), Row(check="lost", what="publish", detail="b", count=3),
         Row(check="duplicated", what="delivery", detail="x", count=1)],
    )


def test_clean_history_has_no_findings(spark: SparkSession, tmp_path: Path) -> None:
    h = History()
    h.op("p1", "subscribe", {"client": "c1", "filter": "t/#"})
    h.publish("p2", "t/1", "m1", expect=["c1"])
    h.publish("p2", "t/1", "m2", retain=True, expect=["c1"])
    # concurrent retained publishes: either may be read back
    h.invoke("p3", "publish", {"topic": "t/2", "msg": "m3", "retain": True, "expect": []})
    h.invoke("p4", "publish", {"topic": "t/2", "msg": "m4", "retain": True, "expect": []})
    h.complete("p3", "publish", "ok", None)
    h.complete("p4", "publish", "ok", None)
    h.op("p1", "unsubscribe", {"client": "c1", "filter": "x"})
    h.drain("c1", ["m1", "m2"])
    h.read({"t/1": "m2", "t/2": "m3"}, {"c1": ["t/#"]})
    ops = safety.operations(read_history(spark, h.write(tmp_path / "h.jsonl"))).cache()
    assert safety.findings(ops).count() == 0
    assertDataFrameEqual(safety.history_figures(ops), [Row(operations=8, drains=1, reads=1)])
