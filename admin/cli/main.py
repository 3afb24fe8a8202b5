"""`vmq-admin`: runs one command of `admin.commands` through a node's HTTP administration API.

    vmq-admin [--config FILE] [--url URL] [--api-key KEY] [--data-dir DIR] [--cacert FILE] [--json] COMMAND [...]

The command line is parsed here with the same table the node uses (an unknown command or a bad parameter is
refused before anything is sent, exit 2), then sent as `GET|POST URL/api/v1/<path>?<parameters>`.

On the node's host no option is needed: the node's configuration file (--config FILE, else VMQ_CONFIG, else
/etc/vmqpy/vmqpy.conf or ./vmqpy.conf, `admin.node_conf`) names the API's address (`listener.http.default`, else
`listener.https.default`) and the data directory (`platform_data_dir`) that holds the node's bootstrap key.

The URL is --url, else VMQ_ADMIN_URL, else the configuration's listener, else http://127.0.0.1:8888.
The key travels in the `x-api-key` header, never in the URL. It comes from --api-key, else the user name of the
URL (VerneMQ's way of writing it: `--url http://KEY@127.0.0.1:8888`; taken out of the URL, so it is never printed),
else VMQ_API_KEY, else DATA_DIR/api.key with DATA_DIR from --data-dir, VMQ_DATA_DIR, the configuration's
`platform_data_dir` or ./data, in this order.

Exit codes: 0 done; 1 the node answered an error (the message is on stderr); 2 the command line is wrong;
3 the node could not be reached or did not answer in time.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from admin.commands import (
    BOOL,
    COMMANDS,
    GROUPS,
    Command,
    Table,
    canonical_words,
    parse_command,
    resolve,
    result_from_json,
    words_to_query,
)
from admin.errors import CommandError
from admin.node_conf import DEFAULT_DATA_DIR, NodeConf, NodeConfError
from admin.node_conf import find as find_node_conf
from admin.results import STREAM_CONTENT_TYPE, Answer

PROG = "vmq-admin"
DEFAULT_URL = "http://127.0.0.1:8888"
API_PREFIX = "/api/v1"
EXIT_OK, EXIT_NODE_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

EXAMPLES: dict[tuple[str, ...], list[str]] = {k: v for g in GROUPS for k, v in g.EXAMPLES.items()}
NOTES: dict[tuple[str, ...], str] = {k: v for g in GROUPS for k, v in g.NOTES.items()}
#: longer help of a command, after its parameters (a group module's optional DETAILS: `set --help`'s keys)
DETAILS: dict[tuple[str, ...], str] = {k: v for g in GROUPS for k, v in getattr(g, "DETAILS", {}).items()}

# global options; none of them may collide with a command's option (checked by the tests)
VALUE_OPTIONS = ("--config", "--url", "--api-key", "--data-dir", "--cacert")
SWITCH_OPTIONS = ("--json", "--help", "-h")


# -- output ------------------------------------------------------------------------------------------------------
def format_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if value != int(value) or abs(value) >= 1e16 else f"{value:.1f}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value).replace("\n", "\\n")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Aligned columns under a header and a line of dashes; columns in the order they first appear; numbers
    right-aligned. An empty table is "(no rows)"."""
    if not rows:
        return "(no rows)"
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    cells = [[format_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    numeric = [all(_is_number(r[c]) for r in rows if r.get(c) is not None) for c in columns]

    def line(values: Sequence[str], align: bool) -> str:
        out = [
            v.rjust(w) if align and num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(out).rstrip()

    return "\n".join([line(columns, False), line(["-" * w for w in widths], False), *(line(c, True) for c in cells)])


def render(result: Answer, as_json: bool) -> str:
    if as_json:
        if isinstance(result, Table):
            return json.dumps(result.rows, indent=2, default=str)
        return json.dumps(result.text)
    if isinstance(result, Table):
        return render_table(result.rows)
    return result.text


# -- help --------------------------------------------------------------------------------------------------------
def _aliases_of(cmd: Command) -> str:
    return f" (also: {', '.join(' '.join(a) for a in cmd.aliases)})" if cmd.aliases else ""


def general_help() -> str:
    width = max(len(c.name) for c in COMMANDS)
    lines = [
        f"usage: {PROG} [--config FILE] [--url URL] [--api-key KEY] [--data-dir DIR] [--cacert FILE] [--json] "
        "COMMAND [PARAMETERS]",
        "",
        "commands:",
        *(f"  {c.name.ljust(width)}  {c.method.ljust(4)}  {c.summary}{_aliases_of(c)}" for c in COMMANDS),
        "",
        "options:",
        "  --config FILE    the node's configuration, for the URL and DIR below (env VMQ_CONFIG; default",
        "                   /etc/vmqpy/vmqpy.conf, then ./vmqpy.conf): on the node's host no other option is needed",
        f"  --url URL        the node's HTTP API (env VMQ_ADMIN_URL; default: the configuration's "
        f"listener.http.default, else {DEFAULT_URL})",
        "  --api-key KEY    API key (or the URL's user name, or env VMQ_API_KEY); otherwise DIR/api.key is read",
        "  --data-dir DIR   the node's data directory (env VMQ_DATA_DIR; default: the configuration's "
        "platform_data_dir, else ./data)",
        "  --cacert FILE    CA certificates (PEM) for an https:// URL (env VMQ_ADMIN_CACERT; default: the system's)",
        "  --json           print tables as a JSON list of rows (text as a JSON string)",
        "  -h, --help       this help; after a command: the command's parameters",
        "",
        f"'{PROG} COMMAND --help' shows a command's parameters and examples.",
        "exit codes: 0 done, 1 the node answered an error, 2 bad command line, 3 node not reachable",
    ]
    return "\n".join(lines)


def command_help(cmd: Command) -> str:
    lines = [f"usage: {PROG} {cmd.usage()}", "", f"{cmd.summary}{_aliases_of(cmd)}"]
    lines.append(f"HTTP: {cmd.method} {API_PREFIX}/{'/'.join(cmd.path)}")
    if cmd.params or cmd.free:
        lines += ["", "parameters:"]
        shown = []
        for p in cmd.params:
            if p.flag:
                long = f"--{p.name}" if p.type is BOOL else f"--{p.name}={p.type.metavar}"
                name = f"-{p.short}, {long}" if p.short else long
            else:
                name = f"{p.name}={p.type.metavar}"
            if p.required:
                tail = " (required)"
            elif p.default is not None:
                default = ("on" if p.default else "off") if p.type is BOOL else format_cell(p.default)
                tail = f" (default: {default})"
            else:
                tail = ""
            shown.append((name, p.help + tail))
        if cmd.free:
            shown.append((cmd.free_metavar, "one or more settings"))
        width = max(len(n) for n, _ in shown)
        lines += [f"  {n.ljust(width)}  {h}" for n, h in shown]
    details = DETAILS.get(cmd.path)
    if details:
        lines += ["", details]
    examples = EXAMPLES.get(cmd.path, [])
    if examples:
        lines += ["", "examples:", *(f"  {e}" for e in examples)]
    return "\n".join(lines)


def group_help(group: str) -> str | None:
    cmds = [c for c in COMMANDS if c.path[0] == group]
    if not cmds:
        return None
    width = max(len(c.name) for c in cmds)
    lines = [f"{PROG} {group} commands:"]
    lines += [f"  {c.name.ljust(width)}  {c.method.ljust(4)}  {c.summary}{_aliases_of(c)}" for c in cmds]
    lines += ["", f"'{PROG} {group} SUBCOMMAND --help' shows its parameters."]
    return "\n".join(lines)


# -- argument handling -------------------------------------------------------------------------------------------
@dataclass
class Options:
    config: str | None = None  # the node's configuration file (admin.node_conf)
    url: str | None = None
    api_key: str | None = None
    data_dir: str | None = None
    cacert: str | None = None  # CA certificates (PEM) that an https:// node's certificate is verified against
    json: bool = False
    help: bool = False
    words: list[str] = field(default_factory=list)


def split_options(argv: Sequence[str]) -> Options:
    """Take the global options out of argv wherever they are; the rest are the command's words, in order."""
    opts = Options()
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        name, eq, value = word.partition("=")
        if name in VALUE_OPTIONS:
            if not eq:
                if i >= len(argv):
                    raise CommandError(f"option {name} needs a value")
                value = argv[i]
                i += 1
            setattr(opts, name[2:].replace("-", "_"), value)
        elif word in ("--help", "-h"):
            opts.help = True
        elif word in ("--json", "--format=json"):  # --format=json: VerneMQ's spelling
            opts.json = True
        else:
            opts.words.append(word)
    return opts


def split_url_key(base: str) -> tuple[str, str | None]:
    """The URL without its user information, and the key written as its user name (`http://KEY@host:8888`,
    VerneMQ's examples), or None. The key is sent in a header like any other; the URL is what messages show."""
    parts = urllib.parse.urlsplit(base)
    if "@" not in parts.netloc:
        return base, None
    userinfo, _, host = parts.netloc.rpartition("@")
    key = urllib.parse.unquote(userinfo.partition(":")[0]).strip()
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), key or None


def find_api_key(
    opts: Options, env: Mapping[str, str], url_key: str | None = None, conf: NodeConf | None = None
) -> tuple[str | None, str]:
    """(key, where it came from) -- or (None, why none was found). `url_key`: the user name of the URL; `conf`:
    the node's configuration file, when one was found."""
    if opts.api_key:
        return opts.api_key, "--api-key"
    if url_key:
        return url_key, "the URL's user name"
    if env.get("VMQ_API_KEY"):
        return env["VMQ_API_KEY"], "VMQ_API_KEY"
    if opts.data_dir:
        data_dir, source = Path(opts.data_dir), "--data-dir"
    elif env.get("VMQ_DATA_DIR"):
        data_dir, source = Path(env["VMQ_DATA_DIR"]), "VMQ_DATA_DIR"
    elif conf is not None:
        data_dir, source = conf.data_dir, f"platform_data_dir of {conf.path}"
    else:
        data_dir, source = DEFAULT_DATA_DIR, "the default data directory"
    path = data_dir / "api.key"
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        return None, f"could not read {path} ({source}): {exc.strerror or exc}"
    if not key:
        return None, f"{path} ({source}) is empty"
    return key, str(path)


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:500]
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return str(doc["error"])
    return json.dumps(doc)[:500]


def run(argv: Sequence[str], env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    def fail(code: int, message: str) -> int:
        print(f"{PROG}: {message}", file=err)
        return code

    try:
        opts = split_options(argv)
    except CommandError as exc:
        return fail(EXIT_USAGE, exc.message)
    if not opts.words:
        if opts.help:
            print(general_help(), file=out)
            return EXIT_OK
        print(general_help(), file=err)
        return EXIT_USAGE
    try:
        cmd, args = parse_command(opts.words)
    except CommandError as exc:
        if opts.help:
            try:
                text: str | None = command_help(resolve(opts.words)[0])
            except CommandError:
                text = group_help(opts.words[0])
            if text:
                print(text, file=out)
                return EXIT_OK
        if len(opts.words) == 1 and (text := group_help(opts.words[0])):
            print(text, file=err)
            return EXIT_USAGE
        return fail(EXIT_USAGE, exc.message)
    if opts.help:
        print(command_help(cmd), file=out)
        return EXIT_OK

    try:
        conf = find_node_conf(opts.config, env)
    except NodeConfError as exc:
        given_url = opts.url or env.get("VMQ_ADMIN_URL") or ""
        given_key = opts.api_key or env.get("VMQ_API_KEY") or opts.data_dir or env.get("VMQ_DATA_DIR")
        if opts.config or env.get("VMQ_CONFIG") or not (given_url and (given_key or "@" in given_url)):
            return fail(EXIT_USAGE, str(exc))
        conf = None  # an unreadable default file does not matter: the URL and the key were given
    chosen_url = opts.url or env.get("VMQ_ADMIN_URL") or (conf.url if conf is not None else None) or DEFAULT_URL
    base, url_key = split_url_key(chosen_url.rstrip("/"))
    if not base.startswith(("http://", "https://")):
        return fail(EXIT_USAGE, f"bad URL {base!r}: expected http://HOST:PORT")
    query = words_to_query(canonical_words(cmd, args))
    url = f"{base}{API_PREFIX}/{'/'.join(cmd.path)}" + (f"?{query}" if query else "")
    key, key_source = find_api_key(opts, env, url_key, conf)
    headers = {"Accept": "application/json", "User-Agent": PROG}
    if key:
        headers["x-api-key"] = key
    data = b"" if cmd.method == "POST" else None
    timeout = cmd.wait(args)
    try:
        request = urllib.request.Request(url, data=data, headers=headers, method=cmd.method)
    except ValueError as exc:
        return fail(EXIT_USAGE, f"bad URL {base!r}: {exc}")
    cacert = opts.cacert or env.get("VMQ_ADMIN_CACERT")
    try:
        context = ssl.create_default_context(cafile=cacert) if cacert else ssl.create_default_context()
    except (OSError, ssl.SSLError) as exc:
        return fail(EXIT_USAGE, f"--cacert {cacert}: cannot use it: {getattr(exc, 'strerror', None) or exc}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),  # straight to the node, never a proxy
                                         urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=timeout) as response:
            if response.headers.get("Content-Type", "").startswith(STREAM_CONTENT_TYPE):
                return _print_lines(response, out, opts.json)
            body = response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            message = _error_text(exc.read())
        if exc.code == 401:
            if key:
                return fail(
                    EXIT_NODE_ERROR, f"the API key from {key_source} is wrong: the node answered 401 ({message})"
                )
            return fail(
                EXIT_NODE_ERROR,
                "the API key is missing: pass --api-key KEY, set VMQ_API_KEY, point --config at the node's "
                "configuration or --data-dir / VMQ_DATA_DIR at its data directory so that its api.key is used "
                f"({key_source}; the node answered 401)",
            )
        return fail(EXIT_NODE_ERROR, f"{message} (HTTP {exc.code})")
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ConnectionRefusedError):
            why = "connection refused"
        elif isinstance(reason, TimeoutError | socket.timeout):
            return fail(EXIT_UNREACHABLE, f"the node at {base} did not answer within {timeout:g} s")
        else:
            why = str(getattr(reason, "strerror", None) or reason)
        return fail(EXIT_UNREACHABLE, f"the node at {base} is not reachable ({why})")
    except TimeoutError:
        return fail(EXIT_UNREACHABLE, f"the node at {base} did not answer within {timeout:g} s")
    except (OSError, ValueError) as exc:
        return fail(EXIT_UNREACHABLE, f"the node at {base} is not reachable ({exc})")
    try:
        result = result_from_json(json.loads(body))
    except ValueError:
        return fail(EXIT_NODE_ERROR, f"{base} answered something that is not a vmq-admin answer: {body[:200]!r}")
    print(render(result, opts.json), file=out)
    if isinstance(result, Table) and result.note:
        print(f"note: {result.note}", file=err)
    note = NOTES.get(cmd.path)
    if note and not opts.json:
        print(note, file=err)
    return EXIT_OK


def _print_lines(response: Any, out: TextIO, as_json: bool) -> int:
    """Print the lines of a streamed answer (`trace client`) as they come; Ctrl-C ends it quietly."""
    try:
        for raw in response:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(doc, dict) or doc.get("type") != "line":
                continue
            print(json.dumps(doc["line"]) if as_json else doc["line"], file=out, flush=True)
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else list(argv), os.environ, sys.stdout, sys.stderr)
    except BrokenPipeError:  # `vmq-admin session show | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
