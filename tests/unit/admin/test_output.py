"""vmq-admin in-process: table rendering, --json, help texts, global options and where the API key comes from."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from admin.cli import main as cli
from admin.commands import COMMANDS, Table, Text, parse_command


def test_render_table_aligns_columns_under_a_header() -> None:
    rows: list[dict[str, Any]] = [
        {"Node": "vmq1@127.0.0.1", "Running": True, "Sessions": 5},
        {"Node": "vmq22@10.0.0.2", "Running": False, "Sessions": 1234, "Note": None},
        {"Node": "x@h", "Note": "joining\nslowly", "Extra": {"a": [1, 2]}},
    ]
    text = cli.render_table(rows)
    assert text.splitlines() == [
        "Node            Running  Sessions  Note             Extra",
        "--------------  -------  --------  ---------------  -----------",
        "vmq1@127.0.0.1  true            5",
        "vmq22@10.0.0.2  false        1234",
        'x@h                                joining\\nslowly  {"a":[1,2]}',
    ]


def test_render_empty_table_and_cells() -> None:
    assert cli.render_table([]) == "(no rows)"
    assert [cli.format_cell(v) for v in (None, True, 0.25, 3.0, 7, "a b")] == ["", "true", "0.25", "3.0", "7", "a b"]


def test_render_json_and_text() -> None:
    rows: list[dict[str, Any]] = [{"Metric": "m", "Value": 1.5}, {"Metric": "n", "Value": None}]
    assert json.loads(cli.render(Table(rows), as_json=True)) == rows
    assert cli.render(Table([]), as_json=True) == "[]"
    assert cli.render(Text("Done"), as_json=False) == "Done"
    assert json.loads(cli.render(Text("a\nb"), as_json=True)) == "a\nb"


def test_split_options_anywhere() -> None:
    opts = cli.split_options(
        ["--url", "http://h:1", "cluster", "leave", "--json", "node=a@h", "-k", "--api-key=K", "--data-dir", "/d"]
    )
    assert (opts.url, opts.api_key, opts.data_dir, opts.json, opts.help) == ("http://h:1", "K", "/d", True, False)
    assert opts.words == ["cluster", "leave", "node=a@h", "-k"]
    vernemq = cli.split_options(["session", "show", "--format=json", "--client_id=x"])  # VerneMQ's spelling
    assert vernemq.json and vernemq.words == ["session", "show", "--client_id=x"]


def test_global_options_do_not_collide_with_command_options() -> None:
    globals_ = {*cli.VALUE_OPTIONS, *cli.SWITCH_OPTIONS}
    for cmd in COMMANDS:
        for p in cmd.params:
            assert f"--{p.name}" not in globals_ and (p.short is None or f"-{p.short}" not in globals_)


def test_every_command_has_examples_that_parse() -> None:
    assert set(cli.EXAMPLES) == {c.path for c in COMMANDS}
    for path, examples in cli.EXAMPLES.items():
        assert examples
        for example in examples:
            words = example.split()
            assert words[0] == "vmq-admin"
            opts = cli.split_options(words[1:])
            cmd, _ = parse_command(opts.words)
            assert cmd.path == path, example


def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(argv, env or {}, out, err)
    return code, out.getvalue(), err.getvalue()


def test_help_texts() -> None:
    code, out, _ = run(["--help"])
    assert code == 0
    for cmd in COMMANDS:
        assert cmd.name in out
    assert "VMQ_ADMIN_URL" in out and "VMQ_API_KEY" in out and "VMQ_DATA_DIR" in out
    code, out, _ = run(["cluster", "leave", "-h"])
    assert code == 0
    assert "usage: vmq-admin cluster leave node=NAME@HOST[:PORT] [-k|--kill-sessions]" in out
    assert "HTTP: POST /api/v1/cluster/leave" in out and "(default: 60.0)" in out and "(default: off)" in out
    code, out, _ = run(["cluster", "--help"])
    assert code == 0 and "cluster join" in out and "session show" not in out
    code, _, err = run(["cluster"])
    assert code == 2 and "cluster leave" in err
    code, _, err = run([])
    assert code == 2 and "usage: vmq-admin" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cluster", "leave"], "vmq-admin: missing parameter 'node' for 'cluster leave'"),
        (["nosuch"], "vmq-admin: unknown command 'nosuch'"),
        (["--url"], "vmq-admin: option --url needs a value"),
        (["--url", "ftp://x", "node", "status"], "vmq-admin: bad URL 'ftp://x'"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str) -> None:
    code, out, err = run(argv)
    assert (code, out) == (2, "")
    assert err.startswith(message)


def test_api_key_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "api.key").write_text("key-a\n")
    (b / "api.key").write_text("key-b\n")
    find = cli.find_api_key
    assert find(cli.Options(api_key="K", data_dir=str(a)), {"VMQ_API_KEY": "E"}) == ("K", "--api-key")
    assert find(cli.Options(data_dir=str(a)), {"VMQ_API_KEY": "E"}) == ("E", "VMQ_API_KEY")
    assert find(cli.Options(data_dir=str(a)), {"VMQ_DATA_DIR": str(b)}) == ("key-a", str(a / "api.key"))
    assert find(cli.Options(), {"VMQ_DATA_DIR": str(b)}) == ("key-b", str(b / "api.key"))
    key, why = find(cli.Options(), {})
    assert key is None and "could not read data/api.key (the default data directory)" in why
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "api.key").write_text("key-default")
    assert find(cli.Options(), {})[0] == "key-default"
    (b / "api.key").write_text("")
    assert find(cli.Options(), {"VMQ_DATA_DIR": str(b)}) == (None, f"{b / 'api.key'} (VMQ_DATA_DIR) is empty")
