"""Where `vmq-admin` finds the node it runs beside: the admin API's URL and the node's bootstrap key, read from the
node's own configuration file.

The file is `--config FILE`, else the environment's VMQ_CONFIG, else the first of DEFAULT_PATHS that exists
(`/etc/vmqpy/vmqpy.conf`, the path the packaged unit starts the node with, then `./vmqpy.conf`). Three keys are
read: `listener.http.default` (else `listener.https.default`) for the URL, `platform_data_dir` (default `./data`)
for `api.key`. A relative `platform_data_dir` is taken relative to the current directory, as the node takes it.

Why a reader of its own and not `vmqpy.config`: `admin` imports nothing of vmqpy (docs/architecture.md), and
`vmq-admin` must work with a file the node's reader would refuse for reasons that do not matter here (a key of a
newer version, a certificate it cannot open as this user). The format is simple enough to read three keys of:
`key = value` lines, `#` comments (a whole line, or after a space), blank lines; the last assignment wins.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATHS: tuple[Path, ...] = (Path("/etc/vmqpy/vmqpy.conf"), Path("vmqpy.conf"))
DEFAULT_DATA_DIR = Path("./data")  # the node's default platform_data_dir
_INLINE_COMMENT = re.compile(r"\s+#.*$")
_ADDRESS = re.compile(r"^\[([^\]]+)\]:(\d+)$|^([^:\[\]]+):(\d+)$")
_WANTED = ("listener.http.default", "listener.https.default", "platform_data_dir")


class NodeConfError(Exception):
    """A configuration file that was asked for by name cannot be read, or holds a bad address."""


@dataclass(frozen=True, slots=True)
class NodeConf:
    """What `vmq-admin` takes from the node's configuration file."""

    path: Path
    url: str | None  # None: the file names no admin listener
    data_dir: Path


def read_keys(text: str) -> dict[str, str]:
    """The values of the keys `vmq-admin` needs, from the text of a configuration file."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = _INLINE_COMMENT.sub("", stripped).partition("=")
        if sep and key.strip() in _WANTED:
            values[key.strip()] = value.strip()
    return values


def admin_url(address: str, scheme: str) -> str:
    """`IP:PORT` of a listener -> the URL to reach it on this host: a wildcard address (0.0.0.0, ::) is reached
    on the loopback address of its family. ValueError for something that is not an address."""
    match = _ADDRESS.match(address.strip())
    if not match:
        raise ValueError(f"expected IP:PORT, got {address.strip()[:60]!r}")
    host, port = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    if host != "localhost":
        ip = ipaddress.ip_address(host)  # ValueError for a name
        if ip.is_unspecified:
            host = "::1" if ip.version == 6 else "127.0.0.1"
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    return f"{scheme}://{host}:{int(port)}"


def parse(path: Path, text: str) -> NodeConf:
    """The NodeConf of a file's text; NodeConfError naming the file and key for a bad listener address."""
    values = read_keys(text)
    url = None
    for key, scheme in (("listener.http.default", "http"), ("listener.https.default", "https")):
        if values.get(key):
            try:
                url = admin_url(values[key], scheme)
            except ValueError as exc:
                raise NodeConfError(f"{path}: {key}: {exc}") from None
            break
    data_dir = Path(values["platform_data_dir"]) if values.get("platform_data_dir") else DEFAULT_DATA_DIR
    return NodeConf(path, url, data_dir)


def find(option: str | None, env: Mapping[str, str], defaults: Sequence[Path] = DEFAULT_PATHS) -> NodeConf | None:
    """The node's configuration: `option` (--config), else VMQ_CONFIG, else the first default path that exists;
    None when none is given and no default exists. A file named by --config or VMQ_CONFIG that cannot be read, or
    a default that exists but cannot be read, is NodeConfError naming it and where it was named."""
    if option or env.get("VMQ_CONFIG"):
        path, source = (Path(option), "--config") if option else (Path(env["VMQ_CONFIG"]), "VMQ_CONFIG")
        try:
            return parse(path, path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise NodeConfError(f"cannot read the node's configuration {path} ({source}): {why}") from None
    for path in defaults:
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            continue
        except (OSError, UnicodeDecodeError) as exc:  # there, but not for this user (/etc/vmqpy is 0750 root:vmqpy)
            why = getattr(exc, "strerror", None) or exc
            raise NodeConfError(f"cannot read the node's configuration {path} (the default path): {why}; run "
                                "vmq-admin as the node's user (sudo -u vmqpy vmq-admin ...), or give --config FILE, "
                                "or --url and --api-key") from None
        return parse(path, text)
    return None
