"""The log file's keys: `log.file` (and its older name `log.console.file`), `log.file.max_size` with units and
`log.file.count` (docs/operations.md, "The log file and its rotation")."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmqpy import config, config_values
from vmqpy.config import ConfigError


def load(tmp_path: Path, text: str) -> config.Config:
    path = tmp_path / "vmqpy.conf"
    path.write_text(text)
    return config.load(path, environ={})


@pytest.mark.parametrize(("text", "size"), [
    ("0", 0), ("4096", 4096), ("10MB", 10 << 20), ("10 mb", 10 << 20), ("512KB", 512 << 10), ("1GB", 1 << 30),
    ("7B", 7), (" 3kb ", 3 << 10),
])
def test_parse_size(text: str, size: int) -> None:
    assert config_values.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1", "10TB", "1.5MB", "MB", "ten", "10 M B"])
def test_a_bad_size_is_refused_with_what_was_expected(text: str) -> None:
    with pytest.raises(ValueError, match="expected a size in bytes"):
        config_values.parse_size(text)


def test_defaults(tmp_path: Path) -> None:
    cfg = load(tmp_path, f"platform_data_dir = {tmp_path / 'data'}\n")
    assert cfg.log_file == tmp_path / "data" / "console.log"
    assert (cfg.log_file_max_size, cfg.log_file_count) == (10 << 20, 5)


@pytest.mark.parametrize("key", ["log.file", "log.console.file"])
def test_either_name_sets_the_file(tmp_path: Path, key: str) -> None:
    cfg = load(tmp_path, f"{key} = {tmp_path / 'vmqpy.log'}\nlog.file.max_size = 2MB\nlog.file.count = 3\n")
    assert cfg.log_file == tmp_path / "vmqpy.log"
    assert (cfg.log_file_max_size, cfg.log_file_count) == (2 << 20, 3)


def test_both_names_for_the_same_file_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "vmqpy.log"
    assert load(tmp_path, f"log.file = {path}\nlog.console.file = {path}\n").log_file == path


def test_both_names_for_two_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"vmqpy.conf:1: log.file = .* and log.console.file = .*vmqpy.conf:2"):
        load(tmp_path, f"log.file = {tmp_path / 'a.log'}\nlog.console.file = {tmp_path / 'b.log'}\n")


@pytest.mark.parametrize(("line", "message"), [
    ("log.file.count = 0", "between 1 and 1000"),
    ("log.file.max_size = lots", "expected a size in bytes"),
])
def test_bad_values_are_refused(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, line + "\n")


def test_vmq_admin_show_names_the_fields() -> None:
    assert config.field_of("log.file") == config.field_of("log.console.file") == "log_file"
    assert config.field_of("log.file.max_size") == "log_file_max_size"
    assert config.field_of("log.file.count") == "log_file_count"
