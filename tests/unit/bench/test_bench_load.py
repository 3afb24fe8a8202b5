"""bench.bench_load: the in-process restart figure reads back every retained message it made."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.bench_load import main, open_node


def test_a_made_directory_loads_every_retained_message_and_grows(tmp_path: Path) -> None:
    assert asyncio.run(open_node(tmp_path, 300))["retained_loaded"] == 0
    figures = asyncio.run(open_node(tmp_path, 500))
    assert figures["retained_loaded"] == 300 and figures["metadata_cpu_s"] >= 0
    assert asyncio.run(open_node(tmp_path, 0))["retained_loaded"] == 500


def test_loading_a_directory_that_was_never_made_is_a_clear_error(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["load", str(tmp_path / "none")])
    assert exit_info.value.code == 2 and "make it first" in capsys.readouterr().err


def test_the_real_node_restart_refuses_a_missing_directory_and_no_rounds(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["node", str(tmp_path / "none")])
    assert exit_info.value.code == 2 and "make it first" in capsys.readouterr().err
    (tmp_path / "data").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(["node", str(tmp_path), "--rounds", "0"])
    assert exit_info.value.code == 2 and "--rounds must be >= 1" in capsys.readouterr().err
