"""Safety checks over a chaos history (the contract is in docs/analytics.md, "The history").

Every count must be 0:
- lost: an acknowledged publish that an expected client never received; an acknowledged subscription, or an
  acknowledged retained value, missing (or replaced by an older value) in the final read;
- unexpected: a message received, or a retained value or a subscription in the final read, that no operation
  (other than one that failed definitively) ever attempted;
- duplicated: a message a client received more than once;
- resurrected: a retained value or a subscription in the final read that an acknowledged clear (retained
  publish with `msg` null) or unsubscribe had removed after it was written.

The final read is checked as a set of registers (cells): one per retained topic, one per (client, filter). A
value is allowed in a cell when the operation that wrote it was not followed by an acknowledged operation on
that cell, i.e. invoked after it completed (an operation whose outcome is unknown never completes).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_analytics.schema import CORRUPT, OP_VALUE_SCHEMA

TYPES = ("invoke", "ok", "fail", "info")
ABSENT = "\u0000absent"  # the value of an empty cell (collect_set drops nulls)


def history_status(history: DataFrame) -> DataFrame:
    """`history` with `status`: `ok`, or why a line is left out (`corrupt`, `missing_field`, `unknown_type`)."""
    return history.withColumn(
        "status",
        F.when(F.col(CORRUPT).isNotNull(), "corrupt")
        .when(F.col("type").isNull() | F.col("process").isNull() | F.col("f").isNull() | F.col("time").isNull(),
              "missing_field")
        .when(~F.col("type").isin(*TYPES), "unknown_type")
        .otherwise("ok"),
    )


def operations(history: DataFrame) -> DataFrame:
    """One row per invoke, paired with the next line of its process when that completes the same `f`:
    process, f, node, invoke_time, complete_time (null unless ok/fail), status (ok/fail/info; info when no
    completion), value (the invoke's value, parsed), result (the completion's value, parsed)."""
    lines = history_status(history).where(F.col("status") == "ok").drop("status")
    order = Window.partitionBy("process").orderBy("time", "seq")
    nxt = F.lead(F.struct("type", "f", "value", "time")).over(order)
    completed = F.col("next.type").isin("ok", "fail", "info") & (F.col("next.f") == F.col("f"))
    status = F.when(completed, F.col("next.type")).otherwise("info")
    return (
        lines.withColumn("next", nxt)
        .where(F.col("type") == "invoke")
        .select(
            "process", "f", "node", F.col("time").alias("invoke_time"),
            F.when(completed & F.col("next.type").isin("ok", "fail"), F.col("next.time")).alias("complete_time"),
            status.alias("status"),
            F.from_json("value", OP_VALUE_SCHEMA).alias("value"),
            F.when(completed, F.from_json(F.col("next.value"), OP_VALUE_SCHEMA)).alias("result"),
        )
    )


def deliveries(ops: DataFrame) -> DataFrame:
    """(client, msg, times): how many times each client received each message, over all ok drains."""
    return (
        ops.where((F.col("f") == "drain") & (F.col("status") == "ok"))
        .select(F.coalesce("result.client", "value.client").alias("client"), F.explode("result.msgs").alias("msg"))
        .groupBy("client", "msg")
        .agg(F.count(F.lit(1)).alias("times"))
    )


def duplicated(deliv: DataFrame) -> DataFrame:
    """(client, msg, times) received more than once."""
    return deliv.where(F.col("times") > 1)


def lost_publishes(ops: DataFrame, deliv: DataFrame) -> DataFrame:
    """(msg, topic, client) for each acknowledged publish, completed before the last drain started, that an
    expected client did not receive (client null: no client at all when the publish names no `expect`)."""
    last_drain = ops.where((F.col("f") == "drain") & (F.col("status") == "ok")).agg(
        F.max("invoke_time").alias("last_drain")
    )
    pubs = (
        ops.where((F.col("f") == "publish") & (F.col("status") == "ok") & F.col("value.msg").isNotNull())
        .crossJoin(last_drain)
        .where(F.col("complete_time") < F.col("last_drain"))
        .select(F.col("value.msg").alias("msg"), F.col("value.topic").alias("topic"),
                F.col("value.expect").alias("expect"))
    )
    named = pubs.where(F.col("expect").isNotNull()).select("msg", "topic", F.explode("expect").alias("client"))
    lost_named = named.join(deliv, ["client", "msg"], "left_anti")
    anyone = pubs.where(F.col("expect").isNull()).join(deliv.select("msg"), "msg", "left_anti")
    return lost_named.select("msg", "topic", "client").unionByName(
        anyone.select("msg", "topic", F.lit(None).cast("string").alias("client"))
    ).distinct()


def unexpected_deliveries(ops: DataFrame, deliv: DataFrame) -> DataFrame:
    """(msg) received by some client but published by no operation that did not fail."""
    attempted = ops.where((F.col("f") == "publish") & (F.col("status") != "fail")).select(
        F.col("value.msg").alias("msg")
    )
    return deliv.select("msg").distinct().join(attempted, "msg", "left_anti")


def final_read(ops: DataFrame) -> DataFrame:
    """The last ok read (one row, null fields when there is none): invoke_time, retained, subscriptions."""
    reads = ops.where((F.col("f") == "read") & (F.col("status") == "ok"))
    last = F.max_by(
        F.struct("invoke_time", F.col("result.retained").alias("retained"),
                 F.col("result.subscriptions").alias("subscriptions")),
        F.struct("complete_time", "invoke_time"),
    )
    return reads.agg(last.alias("read")).select("read.*")


def _sub_cell(client: Column, flt: Column) -> Column:
    return F.to_json(F.array(client, flt))


def register_ops(ops: DataFrame, read: DataFrame) -> DataFrame:
    """The operations on cells invoked before the final read: kind (`retained`/`subscription`), cell (topic,
    or ["client","filter"]), invoke_time, complete_time, status, val (msg id or "1"; null clears the cell)."""
    before = ops.crossJoin(read.select(F.col("invoke_time").alias("read_time"))).where(
        F.col("invoke_time") < F.col("read_time")
    )
    retained = before.where((F.col("f") == "publish") & F.coalesce("value.retain", F.lit(False))).select(
        F.lit("retained").alias("kind"), F.col("value.topic").alias("cell"), "invoke_time", "complete_time",
        "status", F.col("value.msg").alias("val"),
    )
    subs = before.where(F.col("f").isin("subscribe", "unsubscribe")).select(
        F.lit("subscription").alias("kind"), _sub_cell(F.col("value.client"), F.col("value.filter")).alias("cell"),
        "invoke_time", "complete_time", "status",
        F.when(F.col("f") == "subscribe", F.lit("1")).alias("val"),
    )
    return retained.unionByName(subs)


def observed_cells(read: DataFrame) -> DataFrame:
    """The final read as cells: (kind, cell, observed); a retained topic read as null is an empty cell."""
    retained = read.select(F.explode("retained").alias("cell", "observed")).where(F.col("observed").isNotNull())
    subs = read.select(F.explode("subscriptions").alias("client", "filters")).select(
        "client", F.explode("filters").alias("filter")
    )
    return retained.select(F.lit("retained").alias("kind"), "cell", "observed").unionByName(
        subs.select(F.lit("subscription").alias("kind"), _sub_cell(F.col("client"), F.col("filter")).alias("cell"),
                    F.lit("1").alias("observed"))
    ).distinct()


def register_verdicts(reg: DataFrame, observed: DataFrame) -> DataFrame:
    """Per cell: kind, cell, observed (null: empty), verdict (`ok`, `lost`, `unexpected`, `resurrected`)."""
    a = reg.where(F.col("status") != "fail").alias("a")
    b = reg.where(F.col("status") == "ok").alias("b")
    follows = (F.col("a.kind") == F.col("b.kind")) & (F.col("a.cell") == F.col("b.cell")) & (
        F.col("b.invoke_time") > F.col("a.complete_time")
    )
    per_op = a.join(b, follows, "left").groupBy(
        "a.kind", "a.cell", "a.invoke_time", "a.complete_time", "a.status", "a.val"
    ).agg(
        F.count(F.col("b.invoke_time")).alias("followers"),
        F.count(F.when(F.col("b.val").isNull() & F.col("b.invoke_time").isNotNull(), 1)).alias("deletes_after"),
    )
    val = F.coalesce(F.col("val"), F.lit(ABSENT))
    per_cell = per_op.groupBy("kind", "cell").agg(
        F.max((F.col("status") == "ok").cast("int")).alias("acked"),
        F.collect_set(F.when(F.col("followers") == 0, val)).alias("candidates"),
        F.collect_set("val").alias("written"),
        F.collect_set(F.when(F.col("deletes_after") > 0, F.col("val"))).alias("resurrectable"),
    )
    cells = per_cell.join(observed, ["kind", "cell"], "full")
    obs = F.coalesce(F.col("observed"), F.lit(ABSENT))
    allowed = F.when(F.col("candidates").isNull(), F.array(F.lit(ABSENT))).otherwise(
        F.when(F.col("acked") == 1, F.col("candidates")).otherwise(F.array_union("candidates", F.array(F.lit(ABSENT))))
    )
    verdict = (
        F.when(F.array_contains(allowed, obs), "ok")
        .when(
            F.col("observed").isNotNull()
            & ~F.array_contains(F.coalesce("written", F.array().cast("array<string>")), F.col("observed")),
            "unexpected",
        )
        .when(F.col("observed").isNotNull() & F.array_contains("resurrectable", F.col("observed")), "resurrected")
        .otherwise("lost")
    )
    return cells.select("kind", "cell", "observed", verdict.alias("verdict"))


def history_figures(ops: DataFrame) -> DataFrame:
    """One row: operations, ok drains and ok reads (whether deliveries and the final read can be checked)."""
    ok = F.col("status") == "ok"
    return ops.agg(
        F.count(F.lit(1)).alias("operations"),
        F.count(F.when(ok & (F.col("f") == "drain"), 1)).alias("drains"),
        F.count(F.when(ok & (F.col("f") == "read"), 1)).alias("reads"),
    )


def findings(ops: DataFrame) -> DataFrame:
    """Every violation: (check, what, detail) with check `lost`, `unexpected`, `duplicated` or `resurrected`,
    what `publish`, `message`, `delivery`, `retained` or `subscription`, and detail a JSON object."""
    deliv = deliveries(ops)
    read = final_read(ops)
    parts = [
        lost_publishes(ops, deliv).select(
            F.lit("lost").alias("check"), F.lit("publish").alias("what"),
            F.to_json(F.struct("msg", "topic", "client")).alias("detail"),
        ),
        unexpected_deliveries(ops, deliv).select(
            F.lit("unexpected").alias("check"), F.lit("message").alias("what"), F.to_json(F.struct("msg"))
        ),
        duplicated(deliv).select(
            F.lit("duplicated").alias("check"), F.lit("delivery").alias("what"),
            F.to_json(F.struct("client", "msg", "times")),
        ),
        register_verdicts(register_ops(ops, read), observed_cells(read))
        .where(F.col("verdict") != "ok")
        .select(F.col("verdict").alias("check"), F.col("kind").alias("what"),
                F.to_json(F.struct("cell", "observed"))),
    ]
    out = parts[0]
    for part in parts[1:]:
        out = out.union(part)
    return out


def finding_counts(found: DataFrame, examples: int = 10) -> DataFrame:
    """(check, what, count, detail) keeping the first `examples` details of each (check, what)."""
    group = Window.partitionBy("check", "what")
    return (
        found.withColumn("count", F.count(F.lit(1)).over(group))
        .withColumn("n", F.row_number().over(group.orderBy("detail")))
        .where(F.col("n") <= examples)
        .drop("n")
    )
