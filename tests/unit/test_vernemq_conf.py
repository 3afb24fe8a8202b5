"""Stock vernemq.conf files (tests/data, rebuilt from VerneMQ's schemas) read as vmqpy reads them: every key is
implemented or named in the one list of ignored keys; VerneMQ's listener options are never listeners; every
problem of a file is reported at once, in line order; "did you mean" names only a key a slip away."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy import config, vernemq_conf
from vmqpy.config import ConfigError, ConfigErrors
from vmqpy.listener_keys import listener_key
from vmqpy.mqtt.topics import too_deep

DATA = Path(__file__).resolve().parents[1] / "data"
STOCK = [DATA / "vernemq-1.13.conf", DATA / "vernemq-2.conf"]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vernemq.conf"
    path.write_text(text)
    return path


def load(tmp_path: Path, text: str) -> config.Config:
    return config.load(write(tmp_path, text), environ={})


def problems_of(tmp_path: Path, text: str) -> tuple[Path, tuple[str, ...]]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigErrors) as err:
        config.load(path, environ={})
    return path, err.value.problems


@pytest.mark.parametrize("path", STOCK, ids=lambda p: p.name)
def test_every_key_of_a_stock_file_is_read_or_named_as_ignored(path: Path) -> None:
    cfg = config.load(path, environ={})
    settings = config.read_file(path)
    assert len(settings) > 70, "the stock file holds every key VerneMQ writes by default"
    for setting in settings:
        key = setting.key
        named = f"{key} ({setting.where})" in cfg.ignored
        read = (key in config.SCHEMA or key in vernemq_conf.ALIASES or listener_key(key) is not None
                or vernemq_conf.only_value_rule(key) is not None)
        assert named != read, f"{key}: {'both read and ignored' if named else 'neither read nor ignored'}"
    for entry in cfg.ignored:
        assert vernemq_conf.ignored_because(entry.partition(" (")[0]), entry


@pytest.mark.parametrize("path", STOCK, ids=lambda p: p.name)
def test_the_keys_of_a_stock_file_vmqpy_has_take_their_values(path: Path) -> None:
    cfg = config.load(path, environ={})
    assert cfg.topic_max_depth == 10
    assert cfg.ssl_listeners == (), "listener.ssl.pskfile is an option of ssl listeners, not a listener"
    assert cfg.nodename == "VerneMQ@127.0.0.1"
    assert (cfg.max_online_messages, cfg.max_offline_messages, cfg.max_connections) == (1000, 1000, 10000)
    assert cfg.password_file == Path("./etc/vmq.passwd") and cfg.acl_file == Path("./etc/vmq.acl")
    assert cfg.log_format == "file" and cfg.log_file == Path("./log/console.log")
    assert cfg.cluster_listener == ("0.0.0.0", 44053) and cfg.http_listener == ("127.0.0.1", 8888)


def test_the_2x_log_rotation_keys_are_the_log_files_rotation() -> None:
    cfg = config.load(STOCK[1], environ={})
    assert cfg.log_file_max_size == 0, "log.console.rotation.size = infinity: never rotated"
    assert cfg.log_file_count == 5
    assert cfg.log_console_format == "text"


@pytest.mark.parametrize(("text", "max_size", "count"), [
    ("log.console.rotation.size = 10MB\n", 10 << 20, 5),
    ("log.console.rotation.size = INFINITY\nlog.console.rotation.keep = 2\n", 0, 2),
    ("log.file.max_size = 1KB\nlog.console.rotation.size = 2KB\n", 2048, 5),  # the later line wins
])
def test_vernemq_rotation_spellings(tmp_path: Path, text: str, max_size: int, count: int) -> None:
    cfg = load(tmp_path, text)
    assert (cfg.log_file_max_size, cfg.log_file_count) == (max_size, count)


@pytest.mark.parametrize(("text", "log_format"), [
    ("log.console = console\nlog.console.console.format = json\n", "json"),
    ("log.console = console\nlog.console.console.format = text\n", "console"),
    ("log.console = file\nlog.console.console.format = json\n", "file"),  # nothing on stderr to format
    ("log.console = json\nlog.console.console.format = text\n", "json"),
    ("log.console = off\nlog.console.console.format = json\n", "off"),
])
def test_the_console_format_of_2x(tmp_path: Path, text: str, log_format: str) -> None:
    assert load(tmp_path, text).log_format == log_format


def test_json_on_the_console_and_text_in_the_file_is_refused(tmp_path: Path) -> None:
    path, problems = problems_of(tmp_path, "log.console = both\nlog.console.console.format = json\n")
    assert problems == (f"{path}:2: log.console.console.format = json with log.console = both: vmqpy writes the "
                        "same text lines to stderr and to the file; for JSON lines on stderr set log.console = json",)


@pytest.mark.parametrize(("line", "accepted"), [
    ("listener.max_connection_lifetime = 0", True),
    ("listener.max_connection_lifetime = 3600", False),
    ("listener.tcp.max_connection_lifetime = 0", True),
    ("listener.ssl.default.max_connection_lifetime = 10", False),
    ("listener.tcp.name.allow_anonymous_override = off", True),
    ("listener.wss.name.allow_anonymous_override = on", False),
    ("listener.tcp.allowed_protocol_versions = 3,4,5", True),
    ("listener.ws.allowed_protocol_versions = 5, 4, 3", True),
    ("listener.tcp.allowed_protocol_versions = 5", False),
    ("listener.tcp.default.mountpoint = off", True),
    ("listener.tcp.default.mountpoint = tenant/", False),
    ("listener.ssl.psk_support = off", True),
    ("listener.ssl.psk_support = on", False),
    ("log.console.file.format = text", True),
    ("log.console.file.format = json", False),
    ("log.console.rotation.compress_on_rotate = off", True),
    ("log.console.rotation.compress_on_rotate = on", False),
])
def test_vernemq_keys_at_the_value_that_is_vmqpys_behaviour(tmp_path: Path, line: str, accepted: bool) -> None:
    if accepted:
        assert load(tmp_path, f"{line}\n").ignored == ()
        return
    path, problems = problems_of(tmp_path, f"{line}\n")
    assert problems[0].startswith(f"{path}:1: bad value for {line.split()[0]}: vmqpy supports only"), problems


@pytest.mark.parametrize("key", [
    "listener.ssl.pskfile", "listener.ssl.pskfile_separator", "listener.tcp.active_n",
    "listener.tcp.default.buffer_sizes", "listener.nr_of_acceptors", "override_max_online_messages",
    "max_ws_frame_size", "logging.keepalive_as_warning", "logging.obfuscation_secret",
])
def test_vernemq_keys_with_no_meaning_here_are_ignored(tmp_path: Path, key: str) -> None:
    path = write(tmp_path, f"{key} = x\n")
    assert config.load(path, environ={}).ignored == (f"{key} ({path}:1)",)


@pytest.mark.parametrize("key", [
    "listener.ssl.pskfile", "listener.tcp.depth", "listener.ssl.ciphers", "listener.wss.crlfile",
    "listener.tcp.default.mountpoint", "listener.ws.proxy_xff_support",
])
def test_a_vernemq_listener_option_is_never_a_listener(key: str) -> None:
    assert listener_key(key) is None


@pytest.mark.parametrize(("key", "expected"), [
    ("listener.ssl.default", ("ssl", "default", None)),
    ("listener.ssl.cafile", ("ssl", None, "cafile")),
    ("listener.tcp.name", ("tcp", "name", None)),  # 1.13's stock listener: `$name` written as `name`
    ("listener.tcp.name.max_connections", ("tcp", "name", "max_connections")),
])
def test_our_listener_keys_are_still_read(key: str, expected: tuple[str, str | None, str | None]) -> None:
    assert listener_key(key) == expected


def test_an_unsupported_vernemq_listener_option_is_refused_saying_so(tmp_path: Path) -> None:
    path, problems = problems_of(tmp_path, "listener.ssl.ciphers = ECDHE-RSA-AES256-GCM-SHA384\n")
    assert problems == (f"{path}:1: unknown key 'listener.ssl.ciphers': VerneMQ's listener option ciphers is not "
                        "supported by vmqpy (docs/configuration.md, 'Starting from a vernemq.conf')",)


def test_every_problem_of_a_file_is_reported_at_once_in_line_order(tmp_path: Path) -> None:
    path, problems = problems_of(tmp_path, (
        "nodename = nohost\n"
        "topic_max_depth = deep\n"
        "# a comment\n"
        "no_such_key = 1\n"
        "just words\n"
        "erlang.max_ports = 1\n"
        "listener.ssl.default = 127.0.0.1:8883\n"
        "listener.tcp.b.max_connections = 3\n"
    ))
    assert [problem.split(": ", 1)[0] for problem in problems] == [
        f"{path}:1", f"{path}:2", f"{path}:4", f"{path}:5", f"{path}:7", f"{path}:7", f"{path}:8"]
    assert "no listener.tcp.b" in problems[-1]
    assert "needs listener.ssl.certfile" in problems[4] and "needs listener.ssl.keyfile" in problems[5]


def test_a_single_problem_is_still_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "allow_anonymous = maybe\n")
    with pytest.raises(ConfigError, match=rf"^{path}:1: bad value for allow_anonymous: expected on or off"):
        config.load(path, environ={})


@pytest.mark.parametrize(("key", "known", "hint"), [
    # the hints the issue saw: far keys, no longer offered
    ("topic_max_depth", ["topic_alias_max_client", "topic_alias_max_broker"], None),
    ("max_ws_frame_size", ["max_message_size"], None),
    ("override_max_online_messages", ["max_online_messages"], None),
    ("listener.max_connection_lifetime", ["listener.max_connections"], None),
    ("log.console.console.format", ["log.console.file", "log.console"], None),
    ("log.console.rotation.keep", ["log.console.file"], None),
    ("listener.tcp.name.allow_anonymous_override", ["listener.tcp.name.advertise"], None),
    ("prometheus_namespace", ["persistent_session_placement"], None),
    # slips of typing, and abbreviations at a word boundary
    ("topic_max_dept", ["topic_max_depth", "topic_alias_max_client"], "topic_max_depth"),
    ("max_inflight_mesages", ["max_inflight_messages", "max_online_messages"], "max_inflight_messages"),
    ("alow_anonymous", ["allow_anonymous"], "allow_anonymous"),
    ("allow_anonymuos", ["allow_anonymous"], "allow_anonymous"),  # two letters swapped: one slip
    ("max_inflight", ["max_inflight_messages"], "max_inflight_messages"),
    ("max_in", ["max_inflight_messages"], None),  # too short a start to mean it
    ("zzz_qqq", ["allow_anonymous"], None),
])
def test_did_you_mean(key: str, known: list[str], hint: str | None) -> None:
    assert vernemq_conf.suggestion(key, known) == hint


@pytest.mark.parametrize("line", [
    "topic_max_depth = 10", "max_ws_frame_size = 1", "override_max_online_messages = on",
    "listener.max_connection_lifetime = 0", "log.console.rotation.keep = 5",
])
def test_the_keys_the_issue_saw_refused_start(tmp_path: Path, line: str) -> None:
    load(tmp_path, f"{line}\n")


SCHEMA_KEYS = sorted(config.SCHEMA)


@given(st.sampled_from(SCHEMA_KEYS), st.integers(min_value=0), st.sampled_from(["drop", "double", "swap"]))
def test_a_slip_in_a_known_key_is_answered_with_a_key_a_slip_away(key: str, at: int, slip: str) -> None:
    i = at % (len(key) - 1)
    typed = {"drop": key[:i] + key[i + 1:], "double": key[:i] + key[i] + key[i:],
             "swap": key[:i] + key[i + 1] + key[i] + key[i + 2:]}[slip]
    if typed in config.SCHEMA:
        return
    hint = vernemq_conf.suggestion(typed, SCHEMA_KEYS)
    assert hint is not None and vernemq_conf.typing_distance(typed, hint) <= 1, (typed, hint)


@given(st.text(alphabet="ab_.", max_size=12), st.text(alphabet="ab_.", max_size=12))
def test_typing_distance_is_symmetric_and_zero_only_for_equal_keys(a: str, b: str) -> None:
    assert vernemq_conf.typing_distance(a, b) == vernemq_conf.typing_distance(b, a)
    assert (vernemq_conf.typing_distance(a, b) == 0) == (a == b)


@pytest.mark.parametrize(("topic", "max_depth", "deep"), [
    ("a", 1, False), ("a/b", 1, True), ("a/b/c/d/e/f/g/h/i/j", 10, False), ("a/b/c/d/e/f/g/h/i/j/k", 10, True),
    ("/", 1, True),  # two empty levels
    ("a/+/#", 3, False), ("a/+/#", 2, True), ("x/" * 100, 0, False),  # 0: no limit
])
def test_topic_depth(topic: str, max_depth: int, deep: bool) -> None:
    assert too_deep(topic, max_depth) is deep
