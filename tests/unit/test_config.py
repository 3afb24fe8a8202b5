"""The config file: values, defaults, precedence (file < environment < flags), refusals with line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from vmqpy import config, config_values, vernemq_conf
from vmqpy.config import ConfigError
from vmqpy.node import warn_ignored_keys


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
    assert cfg.max_message_size == 1024 * 1024  # 0 (MQTT's 256 MB) no more: docs/broker.md, "Overload"


def test_environment_beats_file_and_flags_beat_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "max_online_messages = 10\nmax_offline_messages = 11\nmax_inflight_messages = 12\n")
    env = {"VMQPY_MAX_ONLINE_MESSAGES": "20", "VMQPY_MAX_OFFLINE_MESSAGES": "21", "HOME": "/root"}
    cfg = config.load(path, environ=env, flags=["max_online_messages=30"])
    assert (cfg.max_online_messages, cfg.max_offline_messages, cfg.max_inflight_messages) == (30, 21, 12)
    env = {"VMQPY_LISTENER__TCP__DEFAULT": "127.0.0.1:2000"}
    assert config.load(None, environ=env).tcp_listeners == (("default", "127.0.0.1", 2000),)


def test_vmqpy_pure_is_the_builds_switch_not_a_setting() -> None:
    """VMQPY_PURE=1 (vmqpy/native.py) starts a node on the pure modules; the configuration passes over it, while
    another unknown VMQPY_ name is still refused."""
    assert config.load(None, environ={"VMQPY_PURE": "1"}).tcp_listeners == config.load(None, environ={}).tcp_listeners
    with pytest.raises(config.ConfigErrors, match="unknown key 'purer'"):
        config.load(None, environ={"VMQPY_PURER": "1"})


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
        ("log.console = xml\n", ":1: bad value for log.console: expected one of console, json, file, both, off"),
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
    assert config_values.parse_duration(text) == seconds


def test_reference_lists_every_key() -> None:
    text = config.reference()
    for key in config.SCHEMA:
        assert f"| {key} |" in text


def test_inline_comments(tmp_path: Path) -> None:
    path = write(tmp_path, "max_inflight_messages = 7   # seven\ndistributed_cookie = a#bcdefghij\n")
    cfg = config.load(path, environ={})
    assert cfg.max_inflight_messages == 7
    assert cfg.distributed_cookie == "a#bcdefghij"


def test_configuration_doc_lists_every_key() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    missing = [key for key in config.SCHEMA if f"| {key} |" not in doc]
    assert not missing, f"docs/configuration.md lacks {missing}: regenerate it from `vmqpy config-reference`"


def test_every_number_key_reaches_the_config() -> None:
    """A key the schema accepts but the Config does not carry would be silently ignored (it happened once:
    receive_max_broker was parsed and dropped)."""
    numeric = [key for key, spec in config.SCHEMA.items()
               if spec.parse is not config_values.parse_bool and _parses(spec, "3")
               and isinstance(spec.parse("3"), int | float)]
    assert "receive_max_broker" in numeric and "topic_alias_max_broker" in numeric
    for key in numeric:
        cfg = config.load(None, environ={}, flags=[f"{key}=3"])
        assert config.value_of(cfg, key) == 3, key


def _parses(spec: config_values.Key, text: str) -> bool:
    try:
        spec.parse(text)
    except (ConfigError, ValueError):
        return False
    return True


# ---------------------------------------------------------------------------------------------- vernemq.conf


def load_text(tmp_path: Path, text: str) -> tuple[config.Config, Path]:
    path = write(tmp_path, text)
    return config.load(path, environ={}), path


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("vmq_passwd.password_file = /etc/vernemq/vmq.passwd\n", "password_file", Path("/etc/vernemq/vmq.passwd")),
        ("plugins.vmq_passwd = off\n", "passwd_enabled", False),
        ("", "passwd_enabled", True),
        ("plugins.vmq_acl = on\n", "acl_enabled", True),
        ("", "acl_enabled", True),  # VerneMQ's default
        ("plugins.vmq_acl = off\n", "acl_enabled", False),
        ("plugins.vmq_acl = off\nvmq_acl.acl_file = /etc/vernemq/vmq.acl\n", "acl_file", Path("/etc/vernemq/vmq.acl")),
        ("acl_file = /etc/vmq.acl\n", "acl_file", Path("/etc/vmq.acl")),
        ("", "acl_reload_interval", 10.0),
        ("vmq_acl.acl_reload_interval = 30\n", "acl_reload_interval", 30.0),
        ("vmq_acl.acl_reload_interval = 0\n", "acl_reload_interval", 0.0),
        ("", "password_reload_interval", 10.0),
        ("vmq_passwd.password_reload_interval = 2m\n", "password_reload_interval", 120.0),
        ("", "failed_login_delay", 1.0),
        ("auth.failed_login_delay = 250ms\n", "failed_login_delay", 0.25),
        ("", "allow_anonymous", False),  # VerneMQ's default
        ("allow_anonymous = on\n", "allow_anonymous", True),
        ("max_message_rate = 5\n", "max_message_rate", 5),
        ("max_subscriptions_per_client = 3\n", "max_subscriptions_per_client", 3),
        ("upgrade_outgoing_qos = on\n", "upgrade_outgoing_qos", True),
        ("", "retry_interval", 20.0),
        ("retry_interval = 5\n", "retry_interval", 5.0),
        ("retry_interval = 2m\n", "retry_interval", 120.0),
        ("listener.max_connections = 10000\n", "max_connections", 10000),
        ("listener.max_connections = infinity\n", "max_connections", None),
        ("log.console = both\n", "log_format", "both"),
        ("platform_data_dir = /var/lib/x\n", "log_file", Path("/var/lib/x/console.log")),
        ("log.console.file = /var/log/vmqpy/console.log\n", "log_file", Path("/var/log/vmqpy/console.log")),
    ],
)
def test_vernemq_keys(tmp_path: Path, text: str, field: str, expected: object) -> None:
    cfg, _path = load_text(tmp_path, text)
    assert getattr(cfg, field) == expected


def test_an_alias_is_read_as_our_key_with_its_line(tmp_path: Path) -> None:
    cfg, path = load_text(tmp_path, "nodename = VerneMQ@127.0.0.1\nvmq_passwd.password_file = /p\n")
    assert cfg.sources["password_file"] == f"{path}:2"
    assert config.value_of(cfg, "password_file") == Path("/p")


@pytest.mark.parametrize(("text", "in_force"), [
    ("vmq_passwd.password_file = /p\n", Path("/p")),
    ("vmq_passwd.password_file = /p\nplugins.vmq_passwd = on\n", Path("/p")),
    ("vmq_passwd.password_file = /p\nplugins.vmq_passwd = off\n", None),
    ("plugins.vmq_passwd = on\n", None),
])
def test_the_password_file_is_consulted_only_with_vmq_passwd_on(tmp_path: Path, text: str, in_force: Path) -> None:
    cfg, _path = load_text(tmp_path, text)
    assert config.password_file_in_force(cfg) == in_force


@pytest.mark.parametrize("key", [
    "erlang.async_threads", "erlang.max_ports", "leveldb.maximum_memory.percent", "metadata_plugin",
    "listener.nr_of_acceptors", "listener.tcp.nr_of_acceptors", "listener.tcp.default.nr_of_acceptors",
    "listener.vmq.clustering.nr_of_acceptors", "plugins.vmq_diversity", "plugins.vmq_webhooks", "plugins.vmq_bridge",
    "plugins.myplugin.path", "plugins.myplugin.priority", "plugins.vmq_passwd.priority",
    "vmq_acl.acl_cache_size", "vmq_passwd.some_future_key", "vmq_diversity.auth_postgres.enabled",
    "vmq_bcrypt.pool_size", "vmq_webhooks.webhook1.hook", "log.syslog", "log.syslog.facility", "log.crash",
    "log.crash.file", "log.crash.maximum_message_size", "log.crash.rotation.keep", "log.error.file", "log.error",
    "log.sasl", "graphite_host", "graphite_interval",
])
def test_keys_without_meaning_here_are_ignored_and_listed_with_their_line(tmp_path: Path, key: str) -> None:
    cfg, path = load_text(tmp_path, f"nodename = VerneMQ@127.0.0.1\n{key} = 10\n")
    assert cfg.ignored == (f"{key} ({path}:2)",)
    assert vernemq_conf.ignored_because(key)


def test_ignored_keys_are_listed_in_order_from_every_source(tmp_path: Path) -> None:
    path = write(tmp_path, "erlang.async_threads = 64\nallow_anonymous = on\nlog.syslog = off\n")
    cfg = config.load(path, environ={"VMQPY_LEVELDB__MAXIMUM_MEMORY__PERCENT": "70"}, flags=["metadata_plugin=x"])
    assert cfg.ignored == (
        f"erlang.async_threads ({path}:1)", f"log.syslog ({path}:3)",
        "leveldb.maximum_memory.percent (environment variable VMQPY_LEVELDB__MAXIMUM_MEMORY__PERCENT)",
        "metadata_plugin (--set metadata_plugin)",
    )


def test_real_keys_are_not_ignored(tmp_path: Path) -> None:
    cfg, _path = load_text(tmp_path, "nodename = VerneMQ@127.0.0.1\ndistributed_cookie = vmq-cookie-01\n"
                                     "plugins.vmq_passwd = off\nplugins.vmq_acl = off\nvmq_acl.acl_file = /a\n"
                                     "vmq_acl.acl_reload_interval = 10\nvmq_passwd.password_reload_interval = 10\n")
    assert cfg.ignored == ()
    assert (cfg.nodename, cfg.distributed_cookie) == ("VerneMQ@127.0.0.1", "vmq-cookie-01")


@pytest.mark.parametrize(("line", "accepted"), [
    ("allow_multiple_sessions = off", True),
    ("allow_multiple_sessions = on", False),
    ("coordinate_registrations = on", True),
    ("coordinate_registrations = off", False),
    ("listener.mountpoint = off", True),
    ("listener.mountpoint = tenant1/", False),
    ("graphite_enabled = off", True),
    ("graphite_enabled = on", False),
])
def test_keys_accepted_at_the_value_that_is_vmqpys_behaviour(tmp_path: Path, line: str, accepted: bool) -> None:
    path = write(tmp_path, f"# x\n{line}\n")
    if accepted:
        assert config.load(path, environ={}).ignored == ()
        return
    with pytest.raises(ConfigError, match=rf"^{path}:2: bad value for {line.split()[0]}: vmqpy supports only"):
        config.load(path, environ={})


@pytest.mark.parametrize(("line", "message"), [
    ("max_inflight = 3", "unknown key 'max_inflight' (did you mean 'max_inflight_messages'?)"),
    ("alow_anonymous = on", "unknown key 'alow_anonymous' (did you mean 'allow_anonymous'?)"),
    ("plugins.vmq_paswd = off", "unknown key 'plugins.vmq_paswd' (did you mean 'plugins.vmq_passwd'?)"),
    ("vmq_acl.acl_files = /a", "unknown key 'vmq_acl.acl_files' (did you mean 'vmq_acl.acl_file'?)"),
    ("vmq_passwd.pasword_file = /p",
     "unknown key 'vmq_passwd.pasword_file' (did you mean 'vmq_passwd.password_file'?)"),
    ("listener.tcp.default.max_conections = 3",
     "unknown key 'listener.tcp.default.max_conections' (did you mean 'listener.tcp.default.max_connections'?)"),
    ("listener.max_conections = 3", "unknown key 'listener.max_conections' (did you mean 'listener.max_connections'?)"),
    ("retry_intervall = 3", "unknown key 'retry_intervall' (did you mean 'retry_interval'?)"),
    ("log.console.fil = /x", "unknown key 'log.console.fil' (did you mean 'log.console.file'?)"),
])
def test_a_misspelling_stops_the_start_with_its_line_and_the_nearest_key(
    tmp_path: Path, line: str, message: str
) -> None:
    path = write(tmp_path, f"nodename = VerneMQ@127.0.0.1\n\n{line}\n")
    with pytest.raises(ConfigError) as err:
        config.load(path, environ={})
    assert str(err.value) == f"{path}:3: {message}"


def test_an_unknown_key_far_from_every_known_one_has_no_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "zzz_qqq = 1\n")
    with pytest.raises(ConfigError) as err:
        config.load(path, environ={})
    assert str(err.value) == f"{path}:1: unknown key 'zzz_qqq'"


@pytest.mark.parametrize(("text", "limits"), [
    ("", {"default": None}),
    ("listener.max_connections = 100\n", {"default": 100}),
    ("listener.tcp.default.max_connections = 2\n", {"default": 2}),
    ("listener.tcp.a = 127.0.0.1:1\nlistener.tcp.b = 127.0.0.1:2\nlistener.max_connections = 100\n"
     "listener.tcp.b.max_connections = 2\n", {"a": 100, "b": 2}),
    ("listener.tcp.b.max_connections = 2\nlistener.tcp.b = 127.0.0.1:2\n", {"b": 2}),  # in any order
    ("listener.max_connections = 5\nlistener.tcp.default.max_connections = infinity\n", {"default": None}),
])
def test_max_connections_per_listener(tmp_path: Path, text: str, limits: dict[str, int | None]) -> None:
    cfg, _path = load_text(tmp_path, text)
    assert {name: config.listener_option(cfg, name, "max_connections") for name, _h, _p in cfg.tcp_listeners} == limits


def test_max_connections_of_a_listener_from_the_environment() -> None:
    env = {"VMQPY_LISTENER__TCP__DEFAULT__MAX_CONNECTIONS": "7"}
    assert config.listener_option(config.load(None, environ=env), "default", "max_connections") == 7


@pytest.mark.parametrize(("text", "message"), [
    ("listener.tcp.a = 127.0.0.1:1\nlistener.tcp.b.max_connections = 2\n",
     ":2: listener.tcp.b.max_connections is set, but there is no listener.tcp.b"),
    ("listener.tcp.default.max_connections = 0\n", ":1: bad value for listener.tcp.default.max_connections"),
    ("listener.max_connections = lots\n", ":1: bad value for listener.max_connections: expected a whole number"),
    ("listener.tcp.max_connections = 5\n", ":1: unknown key 'listener.tcp.max_connections' (did you mean"),
])
def test_listener_option_refusals(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        config.load(path, environ={})
    assert str(err.value).startswith(f"{path}:")
    assert message in str(err.value)


@pytest.mark.parametrize(("text", "in_force"), [
    ("plugins.vmq_acl = on\nvmq_acl.acl_file = /etc/vernemq/vmq.acl\n", Path("/etc/vernemq/vmq.acl")),
    ("vmq_acl.acl_file = /etc/vernemq/vmq.acl\n", Path("/etc/vernemq/vmq.acl")),  # plugins.vmq_acl is on by default
    ("acl_file = /etc/vmq.acl\n", Path("/etc/vmq.acl")),
    ("vmq_acl.acl_file = /etc/vernemq/vmq.acl\nplugins.vmq_acl = off\n", None),
    ("plugins.vmq_acl = on\n", None),  # no file to enforce: every topic allowed
])
def test_an_acl_file_is_enforced_unless_vmq_acl_is_off(tmp_path: Path, text: str, in_force: Path | None) -> None:
    cfg, path = load_text(tmp_path, "nodename = VerneMQ@127.0.0.1\n" + text)
    assert config.acl_file_in_force(cfg) == in_force
    if "acl_file" in text:
        line = 1 + next(n for n, t in enumerate(text.splitlines(), start=1) if "acl_file" in t)
        assert cfg.sources["acl_file"] == f"{path}:{line}"


def test_configuration_doc_explains_every_vernemq_key() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    section = doc.partition("## Starting from a vernemq.conf")[2]
    assert section, "docs/configuration.md lacks the section 'Starting from a vernemq.conf'"
    names = [*vernemq_conf.ALIASES, *(rule.pattern for rule in vernemq_conf.ONLY_VALUE),
             *(rule.pattern for rule in vernemq_conf.IGNORED)]
    missing = [name for name in names if f"`{name}`" not in section]
    assert not missing, f"the section 'Starting from a vernemq.conf' of docs/configuration.md lacks {missing}"


@pytest.mark.parametrize(("text", "lines"), [("erlang.max_ports = 1\nlog.crash = on\n", 1), ("nodename = a@b\n", 0)])
def test_the_node_names_the_ignored_keys_in_one_warning_line(tmp_path: Path, text: str, lines: int) -> None:
    cfg, path = load_text(tmp_path, text)
    with capture_logs() as logs:
        warn_ignored_keys(cfg)
    assert len(logs) == lines
    if lines:
        assert logs[0]["log_level"] == "warning"
        assert logs[0]["keys"] == [f"erlang.max_ports ({path}:1)", f"log.crash ({path}:2)"]


def test_a_short_cookie_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "nodename = a@127.0.0.1\ndistributed_cookie = secret\n")
    with pytest.raises(config.ConfigError, match=r"vmqpy\.conf:2: bad value for distributed_cookie: .*10 characters"):
        config.load(path, environ={})


def test_the_default_cookie_is_refused_only_with_a_cluster_listener_unless_allowed(tmp_path: Path) -> None:
    single, _ = load_text(tmp_path, "nodename = a@127.0.0.1\n")
    assert single.distributed_cookie == config.DEFAULT_COOKIE and config.default_cookie_refusal(single) is None
    clustered, _ = load_text(tmp_path, "listener.vmq.clustering = 127.0.0.1:44053\n")
    refusal = config.default_cookie_refusal(clustered)
    assert refusal is not None and "cluster.allow_default_cookie" in refusal
    allowed, _ = load_text(tmp_path, "listener.vmq.clustering = 127.0.0.1:44053\ncluster.allow_default_cookie = on\n")
    assert config.default_cookie_refusal(allowed) is None
    secret, _ = load_text(tmp_path, "listener.vmq.clustering = 127.0.0.1:44053\ndistributed_cookie = 0123456789ab\n")
    assert config.default_cookie_refusal(secret) is None
    verne, _ = load_text(tmp_path, "listener.vmq.clustering = 127.0.0.1:44053\ndistributed_cookie = vmq\n")
    assert config.default_cookie_refusal(verne) is not None  # VerneMQ's public default: accepted, not clustered


def test_pre_authentication_settings_reach_the_config() -> None:
    cfg = config.load(None, environ={}, flags=["mqtt.connect_max_size=1MB", "mqtt.connect_budget=32MB",
                                               "cluster.handshake_timeout=30s"])
    assert (cfg.connect_max_size, cfg.connect_budget, cfg.cluster_handshake_timeout) == (1 << 20, 32 << 20, 30.0)
    with pytest.raises(config.ConfigError, match=r"mqtt\.connect_budget"):
        config.load(None, environ={}, flags=["mqtt.connect_budget=0"])
