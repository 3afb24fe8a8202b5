"""The config file: values, defaults, precedence (file < environment < flags), refusals with line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmqpy import config
from vmqpy.config import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vmqpy.conf"
    path.write_text(text)
    return path


def test_values_from_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# a comment\n"
        "nodename = n1@127.0.0.11\n"
        "\n"
        "listener.tcp.default = 127.0.0.11:1884\n"
        "listener.tcp.second = 127.0.0.12:1885\n"
        "max_inflight_messages = 7\n"
        "allow_anonymous = off\n"
        "persistent_client_expiration = 2h\n"
        "platform_data_dir = /tmp/somewhere\n",
    )
    cfg = config.load(path, environ={})
    assert cfg.nodename == "n1@127.0.0.11"
    assert cfg.tcp_listeners == (("default", "127.0.0.11", 1884), ("second", "127.0.0.12", 1885))
    assert cfg.max_inflight_messages == 7
    assert cfg.allow_anonymous is False
    assert cfg.persistent_client_expiration == 7200
    assert cfg.data_dir == Path("/tmp/somewhere")
    assert cfg.sources["max_inflight_messages"] == f"{path}:6"


def test_defaults() -> None:
    cfg = config.load(None, environ={})
    assert cfg.tcp_listeners == (("default", "127.0.0.1", 1883),)
    assert cfg.max_offline_messages == 1000
    assert cfg.persistent_client_expiration is None
    assert cfg.max_message_size == 0


def test_environment_beats_file_and_flags_beat_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "max_online_messages = 10\nmax_offline_messages = 11\nmax_inflight_messages = 12\n")
    env = {"VMQPY_MAX_ONLINE_MESSAGES": "20", "VMQPY_MAX_OFFLINE_MESSAGES": "21", "HOME": "/root"}
    cfg = config.load(path, environ=env, flags=["max_online_messages=30"])
    assert (cfg.max_online_messages, cfg.max_offline_messages, cfg.max_inflight_messages) == (30, 21, 12)
    env = {"VMQPY_LISTENER__TCP__DEFAULT": "127.0.0.1:2000"}
    assert config.load(None, environ=env).tcp_listeners == (("default", "127.0.0.1", 2000),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodename = a@b\nno_such_key = 1\n", ":2: unknown key 'no_such_key'"),
        ("max_inflight_messages = lots\n", ":1: bad value for max_inflight_messages: expected a whole number"),
        ("max_inflight_messages = 0\n", ":1: bad value for max_inflight_messages: expected a number between 1"),
        ("\n\nlistener.tcp.default = nowhere\n", ":3: bad value for listener.tcp.default: expected HOST:PORT"),
        ("listener.tcp.default = 127.0.0.1:70000\n", ":1: bad value for listener.tcp.default: port must be"),
        ("allow_anonymous = maybe\n", ":1: bad value for allow_anonymous: expected on or off"),
        ("persistent_client_expiration = soon\n", ":1: bad value for persistent_client_expiration"),
        ("nodename = nohost\n", ":1: bad value for nodename: expected NAME@HOST"),
        ("# fine\njust words\n", ":2: expected 'key = value'"),
        ("log.console = xml\n", ":1: bad value for log.console: expected one of console, json, off"),
        ("max_client_id_size = 8\n", ":1: bad value for max_client_id_size: expected a number between 23"),
    ],
)
def test_refusals_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        config.load(path, environ={})
    assert str(err.value).startswith(str(path))
    assert message in str(err.value)


def test_unknown_environment_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="environment variable VMQPY_NOPE: unknown key 'nope'"):
        config.load(None, environ={"VMQPY_NOPE": "1"})


def test_bad_flag() -> None:
    with pytest.raises(ConfigError, match="--set max_offline_messages: bad value"):
        config.load(None, environ={}, flags=["max_offline_messages=-1"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        config.load(None, environ={}, flags=["max_offline_messages"])


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        config.load(tmp_path / "absent.conf", environ={})


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10), ("30m", 1800), ("1h", 3600), ("1d", 86400), ("1w", 604800), ("250ms", 0.25)]
)
def test_durations(text: str, seconds: float) -> None:
    assert config.parse_duration(text) == seconds


def test_reference_lists_every_key() -> None:
    text = config.reference()
    for key in config.SCHEMA:
        assert f"| {key} |" in text


def test_inline_comments(tmp_path: Path) -> None:
    path = write(tmp_path, "max_inflight_messages = 7   # seven\ndistributed_cookie = a#b\n")
    cfg = config.load(path, environ={})
    assert cfg.max_inflight_messages == 7
    assert cfg.distributed_cookie == "a#b"


def test_configuration_doc_lists_every_key() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    missing = [key for key in config.SCHEMA if f"| {key} |" not in doc]
    assert not missing, f"docs/configuration.md lacks {missing}: regenerate it from `vmqpy config-reference`"


def test_every_number_key_reaches_the_config() -> None:
    """A key the schema accepts but the Config does not carry would be silently ignored (it happened once:
    receive_max_broker was parsed and dropped)."""
    numeric = [key for key, spec in config.SCHEMA.items()
               if spec.parse is not config.parse_bool and _parses(spec, "3")
               and isinstance(spec.parse("3"), int | float)]
    assert "receive_max_broker" in numeric and "topic_alias_max_broker" in numeric
    for key in numeric:
        cfg = config.load(None, environ={}, flags=[f"{key}=3"])
        assert config.value_of(cfg, key) == 3, key


def _parses(spec: config.Key, text: str) -> bool:
    try:
        spec.parse(text)
    except (ConfigError, ValueError):
        return False
    return True
