"""`vmq-admin` beside its node: the node's configuration file read for the API's URL and the data directory
(the real `vmq-admin` run with only --config: tests/unit/admin/test_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from admin.node_conf import DEFAULT_DATA_DIR, NodeConf, NodeConfError, admin_url, find, parse, read_keys

CONF = """\
## a vmqpy.conf as an operator writes it
nodename = vmq1@127.0.0.1
listener.tcp.default = 0.0.0.0:1883
#listener.http.default = 10.0.0.1:1
listener.http.default = 127.0.0.1:8888   # the admin API
platform_data_dir = /var/lib/vmqpy
listener.http.default.http_modules = vmq_status_http
"""


def test_read_keys_takes_the_three_keys_and_skips_comments() -> None:
    assert read_keys(CONF) == {"listener.http.default": "127.0.0.1:8888", "platform_data_dir": "/var/lib/vmqpy"}
    assert read_keys("listener.http.default = 1.2.3.4:1\nlistener.http.default = 1.2.3.4:2\n") == {
        "listener.http.default": "1.2.3.4:2"}  # the last assignment wins, as in the node's reader
    assert read_keys("garbage line\n= 3\n") == {}


@pytest.mark.parametrize(("address", "scheme", "url"), [
    ("127.0.0.1:8888", "http", "http://127.0.0.1:8888"),
    ("0.0.0.0:8888", "http", "http://127.0.0.1:8888"),  # a wildcard is reached on loopback
    ("[::]:8888", "https", "https://[::1]:8888"),
    ("[::1]:8443", "https", "https://[::1]:8443"),
    ("10.1.2.3:80", "http", "http://10.1.2.3:80"),
    ("localhost:8888", "http", "http://localhost:8888"),
])
def test_admin_url(address: str, scheme: str, url: str) -> None:
    assert admin_url(address, scheme) == url


@pytest.mark.parametrize("address", ["8888", "host.example:8888", "127.0.0.1", "[::1:8888", ""])
def test_admin_url_refuses(address: str) -> None:
    with pytest.raises(ValueError):
        admin_url(address, "http")


@pytest.mark.parametrize(("text", "url", "data_dir"), [
    (CONF, "http://127.0.0.1:8888", Path("/var/lib/vmqpy")),
    ("listener.https.default = 0.0.0.0:8443\n", "https://127.0.0.1:8443", DEFAULT_DATA_DIR),
    ("listener.https.default = 127.0.0.2:8443\nlistener.http.default = 127.0.0.3:8888\n", "http://127.0.0.3:8888",
     DEFAULT_DATA_DIR),
    ("nodename = a@b\n", None, DEFAULT_DATA_DIR),
])
def test_parse(text: str, url: str | None, data_dir: Path) -> None:
    assert parse(Path("x.conf"), text) == NodeConf(Path("x.conf"), url, data_dir)


def test_parse_names_a_bad_address() -> None:
    with pytest.raises(NodeConfError, match=r"x.conf: listener.http.default: expected IP:PORT"):
        parse(Path("x.conf"), "listener.http.default = somewhere\n")


def test_find_order(tmp_path: Path) -> None:
    given, env_file, default = tmp_path / "given.conf", tmp_path / "env.conf", tmp_path / "default.conf"
    for path, port in ((given, 1), (env_file, 2), (default, 3)):
        path.write_text(f"listener.http.default = 127.0.0.1:{port}\n")
    env = {"VMQ_CONFIG": str(env_file)}
    assert find(str(given), env, [default]) == NodeConf(given, "http://127.0.0.1:1", DEFAULT_DATA_DIR)
    assert find(None, env, [default]) == NodeConf(env_file, "http://127.0.0.1:2", DEFAULT_DATA_DIR)
    assert find(None, {}, [tmp_path / "missing.conf", default]) == NodeConf(default, "http://127.0.0.1:3",
                                                                            DEFAULT_DATA_DIR)
    assert find(None, {}, [tmp_path / "missing.conf"]) is None


@pytest.mark.parametrize(("option", "env", "source"), [("nope.conf", {}, "--config"),
                                                        (None, {"VMQ_CONFIG": "nope.conf"}, "VMQ_CONFIG")])
def test_a_named_file_that_is_missing_is_an_error(tmp_path: Path, option: str | None, env: dict[str, str],
                                                  source: str) -> None:
    with pytest.raises(NodeConfError, match=rf"cannot read the node's configuration nope.conf \({source}\)"):
        find(option, env, [])


def test_a_default_path_that_is_there_but_unreadable_is_an_error(tmp_path: Path) -> None:
    unreadable = tmp_path / "vmqpy.conf"
    unreadable.mkdir()  # stands for a file this user may not read (tests may run as root, who reads any file)
    with pytest.raises(NodeConfError, match=r"vmqpy.conf \(the default path\): .*sudo -u vmqpy"):
        find(None, {}, [tmp_path / "missing.conf", unreadable])

