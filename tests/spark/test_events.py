"""Reading and normalizing log lines: typed columns, malformed lines counted (never fatal), file discovery."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_analytics import events
from spark_analytics.readers import InputError, find_log_files, read_logs, read_run_metadata
from tests.spark.conftest import events_of
from tests.spark.logs import apply, exchange, gc, pkey, rid, ts, view, write, write_logs

GOOD = [
    write("n1", 0, "a", 1, logical=2),
    apply("n2", 5, "a", "n1", 1, siblings=2),
    exchange("n1", 10, "n2", received=3, repaired=1),
    gc("n1", 20, 4),
    view("n1", 30, [["n1", "n2"]]),
]
BAD = [
    "not json at all",
    '{"schema":1,"ts":"late","node":"n1","hlc":[1,0,"n1#1"],"event":"md_gc"}',  # ts is not a number
    '{"schema":1,"ts":5,"node":"n2","hlc":[1,0,"n2#1"],"event":"md_apply","prefix":"retain","key":["","a"],'
    '"dot":["n1#1",1],"via":"broadcast","siblings":"two"}',  # siblings is not a number
    '{"schema":1,"ts":5,"node":"n2","hlc":[1,0,"n2#1"],"event":"md_write","prefix":"retain","key":["","a"],'
    '"op":"put"}',  # no dot
    '{"schema":1,"node":"n2","hlc":[1,0,"n2#1"],"event":"md_gc"}',  # no ts
    '{"schema":1,"ts":5,"node":"n2","hlc":[1,0,"n2#1"],"event":"md_write","prefix":"retain","key":["","a"],'
    '"dot":["n2#1","x"],"op":"put"}',  # the dot's counter is not a number
    '{"schema":1,"ts":5,"node":"n2","hlc":[1,0,"n2#1"],"event":"md_exchange","peer":"n1"}',  # no result
    '{"schema":2,"ts":5,"node":"n2","hlc":[1,0,"n2#1"],"event":"md_gc"}',
    '{"schema":1,"ts":5,"node":"n2","hlc":[1,0,"n2#1"],"event":"md_future","new_field":1}',
    '[1, 2, 3]',
    # issue 19, finding 4: a short hlc
    '{"schema":1,"ts":5,"node":"n2","hlc":[1],"event":"md_write","prefix":"retain","key":["","a"],'
    '"dot":["n2#1",4],"op":"put"}',
]


def test_normalize_types_every_event_and_marks_every_bad_line(spark: SparkSession) -> None:
    ev = events_of(spark, GOOD + BAD)
    assertDataFrameEqual(
        events.line_stats(ev).select("status", "event", "lines"),
        [
            Row(status="ok", event="md_write", lines=1),
            Row(status="ok", event="md_apply", lines=1),
            Row(status="ok", event="md_exchange", lines=1),
            Row(status="ok", event="md_gc", lines=1),
            Row(status="ok", event="cluster_view", lines=1),
            Row(status="corrupt", event=None, lines=2),  # not JSON, a JSON array
            Row(status="corrupt", event="md_gc", lines=1),
            Row(status="corrupt", event="md_apply", lines=1),
            Row(status="missing_field", event="md_write", lines=3),
            Row(status="missing_field", event="md_gc", lines=1),
            Row(status="missing_field", event="md_exchange", lines=1),
            Row(status="unsupported_schema", event="md_gc", lines=1),
            Row(status="unknown_event", event="md_future", lines=1),
        ],
    )


def test_a_context_that_is_not_a_map_is_read_as_null_and_the_line_counts(spark: SparkSession) -> None:
    """Issue 19, finding 4: no report reads `context`; the rest of such a line is well formed and is used."""
    line = ('{"schema":1,"ts":5,"node":"n2","hlc":[1,0,"n2#1"],"event":"md_write","prefix":"retain",'
            '"key":["","a"],"dot":["n2#1",3],"op":"put","context":["n1#1",1]}')
    ev = events_of(spark, [line])
    assert [(r.status, r.event) for r in events.line_stats(ev).collect()] == [("ok", "md_write")]
    assert [r.dot_counter for r in events.writes(ev).collect()] == [3]


def test_event_tables_have_typed_columns(spark: SparkSession) -> None:
    ev = events_of(spark, GOOD + BAD)
    assertDataFrameEqual(
        events.writes(ev),
        [Row(node="n1", ts=ts(0), pkey=pkey("a"), dot_node=rid("n1"), dot_counter=1, hlc_wall=1_795_330_000_000,
             hlc_logical=2, hlc_node=rid("n1"), delete=False, writeback=False, dot_name=rid("n1"))],
    )
    assertDataFrameEqual(
        events.applies(ev),
        [Row(node="n2", ts=ts(5), pkey=pkey("a"), dot_node=rid("n1"), dot_counter=1, via="broadcast", siblings=2)],
    )
    assertDataFrameEqual(
        events.exchanges(ev).select("node", "peer", "result", "objects_received", "repaired", "bytes_sent"),
        [Row(node="n1", peer="n2", result="ok", objects_received=3, repaired=1, bytes_sent=100)],
    )
    assertDataFrameEqual(events.gcs(ev), [Row(node="n1", ts=ts(20), dots_pruned=4, keys_deleted=0)])
    assertDataFrameEqual(events.views(ev).select("node", "n_groups", "ready"),
                         [Row(node="n1", n_groups=1, ready=True)])


def test_node_spans(spark: SparkSession) -> None:
    ev = events_of(spark, [*GOOD, write("n2", 70, "b", 1), "garbage"])
    assertDataFrameEqual(
        events.node_spans(ev),
        [Row(node="n1", first_ts=ts(0), last_ts=ts(30), events=4), Row(node="n2", first_ts=ts(5), last_ts=ts(70),
                                                                          events=2)],
    )


def test_read_logs_from_node_directories(spark: SparkSession, tmp_path: Path) -> None:
    write_logs(tmp_path, [*GOOD, "{broken"])
    files = find_log_files(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["n1/replication.log", "n2/replication.log"]
    stats: dict[tuple[str, str | None], int] = {}
    for r in events.line_stats(read_logs(spark, files).transform(events.normalize)).collect():
        stats[r["status"], r["node"]] = stats.get((r["status"], r["node"]), 0) + r["lines"]
    assert stats == {("ok", "n1"): 4, ("ok", "n2"): 1, ("corrupt", None): 1}


def test_find_log_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such directory"):
        find_log_files(tmp_path / "missing")
    with pytest.raises(InputError, match=r"no replication\.log"):
        find_log_files(tmp_path)
    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(InputError, match="empty"):
        find_log_files(tmp_path)
    (tmp_path / "b.log").write_text("{}\n")
    (tmp_path / "history.jsonl").write_text("{}\n")
    assert [p.name for p in find_log_files(tmp_path, exclude=(tmp_path / "history.jsonl",))] == ["a.jsonl", "b.log"]
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "replication.log").write_text("{}\n")
    (tmp_path / "n1" / "console.log").write_text("not a replication log\n")
    assert [p.name for p in find_log_files(tmp_path)] == ["replication.log"]


def test_run_metadata(tmp_path: Path) -> None:
    assert read_run_metadata(tmp_path) == {}
    (tmp_path / "run.json").write_text(json.dumps({"experiment": "short", "mode": "majority", "seed": 7, "other": 1}))
    assert read_run_metadata(tmp_path) == {"experiment": "short", "mode": "majority", "seed": 7}
    (tmp_path / "run.json").write_text("{")
    assert "run_json_error" in read_run_metadata(tmp_path)


def test_for_report_hashes_keys_and_dots_consistently(spark: SparkSession, tmp_path: Path) -> None:
    sub = "subscription"
    lines = [*GOOD, write("n2", 40, "b", 1, prefix=sub), apply("n1", 45, "b", "n2", 1, prefix=sub), *BAD]
    raw = read_logs(spark, find_log_files(write_logs(tmp_path, lines)))
    ev = events.for_report(raw, partitions=3)
    assert tuple(ev.columns) == events.REPORT_COLUMNS
    assert ev.rdd.getNumPartitions() == 3
    # the fields of the other lines, packed into one column, read back as they are
    flat = raw.transform(events.normalize)
    for table in (events.exchanges, events.gcs, events.views):
        assertDataFrameEqual(table(ev), table(flat))
    # the same statuses as normalize: hashing changes no verdict on a line
    def stats(df: DataFrame) -> set[tuple[str, str | None, str | None, int]]:
        return {(r["status"], r["event"], r["node"], r["lines"]) for r in events.line_stats(df).collect()}

    assert stats(ev) == stats(raw.transform(events.normalize))
    names = {r["pkey"]: r["name"] for r in events.key_names(raw).collect()}
    assert sorted(names.values()) == [pkey("a"), pkey("b", prefix=sub)]
    writes = {names[r["pkey"]]: r for r in events.writes(ev).collect()}
    applied = {names[r["pkey"]]: r for r in events.applies(ev).collect()}
    # an apply names the write's dot by the same hash, and two different replica ids hash differently
    assert applied[pkey("a")]["dot_node"] == writes[pkey("a")]["dot_node"]
    assert applied[pkey("b", prefix=sub)]["dot_node"] == writes[pkey("b", prefix=sub)]["dot_node"]
    assert writes[pkey("a")]["dot_node"] != writes[pkey("b", prefix=sub)]["dot_node"]


def _line_statuses(spark: SparkSession, lines: list[str]) -> dict[str, int]:
    stats: dict[str, int] = {}
    for r in events.line_stats(events_of(spark, lines)).collect():
        stats[r["status"]] = stats.get(r["status"], 0) + r["lines"]
    return stats


ONE = json.dumps(gc("n1", 20, 4))
TWO = json.dumps(gc("n2", 30, 1))


@pytest.mark.parametrize(("line", "why"), [
    (ONE + TWO, "two objects on one line"),
    (ONE + " " + TWO, "two objects and a blank"),
    (ONE + "," + TWO, "two objects and a comma"),
    (f"[{ONE},{TWO}]", "an array of two objects"),
    (ONE + " trailing garbage", "trailing text"),
    (ONE + "}", "a closing brace too many"),
    (ONE + "]", "a closing bracket too many"),
    (ONE + ',{"schema":1}]', "a comma, an object and a bracket"),
    (ONE[:-1], "cut short"),
])
def test_a_line_that_is_not_exactly_one_object_is_one_malformed_line(
    spark: SparkSession, line: str, why: str
) -> None:
    """Issue 17: every such line counts once as malformed, and nothing of it is read as an event."""
    assert _line_statuses(spark, [ONE, line, TWO]) == {"ok": 2, "corrupt": 1}, why


def test_blanks_around_an_object_and_braces_in_strings_are_fine(spark: SparkSession) -> None:
    odd = write("n1", 0, 'a}{"b', 1)  # braces and quotes inside a string of the key
    lines = ["  " + ONE + "  \t", json.dumps(odd), "", "   ", json.dumps(odd, indent=None, separators=(", ", " : "))]
    assert _line_statuses(spark, lines) == {"ok": 3}


def test_rotated_and_compressed_logs_and_globs(spark: SparkSession, tmp_path: Path) -> None:
    """A node's log rotated (`replication.log.1`) and compressed (`replication.log.2.gz`): every line is read; a
    node whose only log is compressed is not left out; `--logs` takes glob patterns."""
    run = tmp_path / "run"
    for node, name, line in [("n1", "replication.log", ONE), ("n1", "replication.log.1", TWO),
                             ("n1", "replication.log.2.gz", json.dumps(gc("n1", 5, 1))),
                             ("n2", "replication.log.1.gz", json.dumps(gc("n2", 6, 1)))]:
        path = run / node / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = (line + "\n").encode()
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (run / "n1" / "node.log").write_text("not a replication log\n")
    files = find_log_files(run)
    assert [p.relative_to(run).as_posix() for p in files] == [
        "n1/replication.log", "n1/replication.log.1", "n1/replication.log.2.gz", "n2/replication.log.1.gz"]
    assert read_logs(spark, files).where("_corrupt_record IS NULL").count() == 4
    assert find_log_files([str(run / "*" / "replication.log*.gz")]) == [files[2], files[3]]
    assert find_log_files([str(run / "n2"), str(run / "n1" / "replication.log")]) == [files[0], files[3]]
    assert find_log_files(str(run / "**" / "n2"))  == [files[3]]
    with pytest.raises(InputError, match="matches nothing"):
        find_log_files([str(run / "n9*")])


def test_a_log_that_cannot_be_read_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "replication.log").write_text(ONE + "\n")
    (tmp_path / "n2").mkdir()
    (tmp_path / "n2" / "replication.log.1.gz").write_bytes(gzip.compress((ONE + "\n").encode())[:-12])  # cut short
    with pytest.raises(InputError, match=r"replication\.log\.1\.gz: cannot be read"):
        find_log_files(tmp_path)
    (tmp_path / "n2" / "replication.log.1.gz").write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="cannot be read"):
        find_log_files(tmp_path)
