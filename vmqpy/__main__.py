"""`vmqpy start --config FILE`: run a node in the foreground (SIGTERM or SIGINT stop it cleanly).

`vmqpy config check FILE` reads a file as `start` would (the same `configuration` function) and reports every
problem at once, each with its file and line, and the keys it ignores; `start` refuses a file with problems
naming all of them too, not only the first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import structlog

from vmqpy import BUILD, __version__, config, logconfig, vernemq_conf
from vmqpy.broker.access import acl, auth
from vmqpy.broker.listeners import tls

#: The umask of `vmqpy start`: files 0600, directories 0700 (docs/operations.md, "Disk budget of a node").
PRIVATE_UMASK = 0o077


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vmqpy", description="A VerneMQ-like clustered MQTT broker.")
    parser.add_argument("--version", action="version", version=f"vmqpy {__version__}, {BUILD.describe()}")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="run a node in the foreground")
    start.add_argument("--config", "-c", type=Path, help="vernemq.conf-style file (key = value lines)")
    start.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one configuration key (repeatable); beats the file and VMQPY_* variables",
    )
    start.add_argument(
        "--workers", type=int, default=None, metavar="N",
        help="run N nodes on this host as one local cluster behind the configured MQTT ports (SO_REUSEPORT), "
             "one per core, each started again when it ends (docs/scaling.md)",
    )
    commands.add_parser("config-reference", help="print every configuration key with its default")
    config_cmd = commands.add_parser("config", help="configuration tools")
    config_commands = config_cmd.add_subparsers(dest="config_command", required=True)
    check = config_commands.add_parser(
        "check", help="report every problem of a configuration file at once (exit 2 when there is one)")
    check.add_argument("file", type=Path, help="vernemq.conf-style file")
    check.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="an override as `start --set` takes it (repeatable)")
    passwd = commands.add_parser("passwd", help="add or replace a user in a password file")
    passwd.add_argument("file", type=Path)
    passwd.add_argument("username")
    passwd.add_argument("--password", help="the password (default: read one line from standard input, as bytes)")
    passwd.add_argument("--allow-empty-password", action="store_true",
                        help="accept an empty password (refused otherwise)")
    return parser


def files_problems(cfg: config.Config) -> list[str]:
    """What the files a configuration names hold wrong (password file, ACL, certificates and keys) and a refused
    cookie: what `start` checks before it starts anything, besides the configuration itself."""
    problems: list[str] = []
    password_file = config.password_file_in_force(cfg)
    acl_file = config.acl_file_in_force(cfg)
    where = cfg.sources.get
    checks: list[tuple[str | None, Callable[[], object]]] = [
        (where("password_file"), lambda: auth.parse_password_file(password_file) if password_file else None),
        (where("acl_file"), lambda: acl.load_acl(acl_file) if acl_file is not None else None),  # a bad line too
        (None, lambda: tls.ListenerContexts(tls.settings_of(cfg))),  # certificate, key or CA file not usable
        (None, lambda: tls.https_context(cfg)),
        (None, lambda: tls.cluster_contexts(cfg)),  # cluster.tls.*: the same for the cluster links
    ]
    for source, check in checks:
        try:
            check()
        except (config.ConfigError, auth.PasswordFileError, acl.AclError) as exc:
            problems.append(f"{source}: {exc}" if source is not None else str(exc))
    refusal = config.default_cookie_refusal(cfg)
    if refusal is not None:
        source = where("listener.vmq.clustering")
        problems.append(f"{source}: {refusal}" if source is not None else refusal)
    return problems


def configuration(path: Path | None, overrides: list[str]) -> tuple[config.Config | None, list[str]]:
    """The node's configuration and every problem of it (none: it starts): the file, VMQPY_* variables and
    overrides (vmqpy.config), then the files it names (`files_problems`)."""
    try:
        cfg = config.load(path, flags=overrides)
    except config.ConfigErrors as exc:
        return None, list(exc.problems)
    except config.ConfigError as exc:
        return None, [str(exc)]
    return cfg, files_problems(cfg)


def check_file(path: Path, overrides: list[str]) -> int:
    """`vmqpy config check FILE`: every problem, then the ignored keys with why, and a summary line."""
    cfg, problems = configuration(path, overrides)
    for problem in problems:
        print(f"error: {problem}")
    ignored = cfg.ignored if cfg is not None else ()
    for entry in ignored:
        key = entry.partition(" (")[0]
        print(f"ignored: {entry}: {vernemq_conf.ignored_because(key)}")
    errors = f"{len(problems)} error{'' if len(problems) == 1 else 's'}"
    verdict = "the node would not start" if problems or cfg is None else "the node would start"
    print(f"{path}: {errors}, {len(ignored)} key{'' if len(ignored) == 1 else 's'} ignored: {verdict}")
    return 2 if problems else 0


def ignored_keys_line(cfg: config.Config) -> str:
    """The one line on stderr naming the ignored keys when the log does not go to stderr (log.console = file or
    off), where the node's own warning (vmqpy.node.warn_ignored_keys) would not be seen."""
    return (f"vmqpy: warning: {len(cfg.ignored)} configuration keys ignored, they have no meaning in vmqpy "
            f"(`vmqpy config check` says why): {', '.join(cfg.ignored)}")


def start_workers(cfg: config.Config, args: argparse.Namespace) -> int:
    """`vmqpy start --workers N`: the supervisor of N nodes (vmqpy.workers)."""
    from vmqpy.workers.plan import WorkersRefused, plan
    from vmqpy.workers.supervisor import Supervisor

    try:
        workers = plan(cfg, args.workers)
    except WorkersRefused as exc:
        print(f"vmqpy: config error: {exc}", file=sys.stderr)
        return 2
    return Supervisor(workers, args.config, args.overrides).run()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config-reference":
        print(config.reference())
        return 0
    if args.command == "config":
        return check_file(args.file, args.overrides)
    if args.command == "passwd":
        # The password as bytes (an MQTT password is binary data): the argument's own bytes, or standard input's.
        password = (os.fsencode(args.password) if args.password is not None
                    else sys.stdin.buffer.readline().rstrip(b"\n").rstrip(b"\r"))
        try:
            auth.add_user(args.file, args.username, password, allow_empty=args.allow_empty_password)
        except auth.PasswordFileError as exc:
            print(f"vmqpy: {exc}", file=sys.stderr)
            return 2
        return 0
    # A SIGHUP before the node has read its files has nothing to reload (they are read after it): ignored, not the
    # signal's default action (the end of the process). From its start on, the node keeps one (vmqpy.hangup).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    cfg, problems = configuration(args.config, args.overrides)
    if problems or cfg is None:
        for problem in problems:
            print(f"vmqpy: config error: {problem}", file=sys.stderr)
        return 2
    os.umask(PRIVATE_UMASK)  # everything the node writes (data directory, database, logs, api.key) is its own
    if args.workers is not None:
        return start_workers(cfg, args)
    try:
        logconfig.configure(cfg.log_format, cfg.log_level, node=cfg.nodename, file=cfg.log_file,
                            max_size=cfg.log_file_max_size, count=cfg.log_file_count)
    except OSError as exc:
        where = cfg.sources.get("log.file") or cfg.sources.get("log.console.file", "log.file")
        print(f"vmqpy: config error: {where}: cannot open the log file {cfg.log_file}: {exc.strerror}",
              file=sys.stderr)
        return 2
    if cfg.ignored and cfg.log_format in ("file", "off"):
        print(ignored_keys_line(cfg), file=sys.stderr)
    if config.public_cookie(cfg):
        structlog.get_logger("vmqpy.node").warning(
            "distributed_cookie is the public default: set a long random secret shared by the cluster",
            cluster_listener=cfg.cluster_listener is not None)
    from vmqpy.node import serve

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(cfg))
    except OSError as exc:
        print(f"vmqpy: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
