"""`vmqpy start --config FILE`: run a node in the foreground (SIGTERM or SIGINT stop it cleanly)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

import structlog

from vmqpy import __version__, config, logconfig
from vmqpy.broker import acl, auth, tls

#: The umask of `vmqpy start`: files 0600, directories 0700 (docs/operations.md, "Disk budget of a node").
PRIVATE_UMASK = 0o077


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vmqpy", description="A VerneMQ-like clustered MQTT broker.")
    parser.add_argument("--version", action="version", version=f"vmqpy {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="run a node in the foreground")
    start.add_argument("--config", "-c", type=Path, help="vernemq.conf-style file (key = value lines)")
    start.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one configuration key (repeatable); beats the file and VMQPY_* variables",
    )
    commands.add_parser("config-reference", help="print every configuration key with its default")
    passwd = commands.add_parser("passwd", help="add or replace a user in a password file")
    passwd.add_argument("file", type=Path)
    passwd.add_argument("username")
    passwd.add_argument("--password", help="the password (default: read one line from standard input, as bytes)")
    passwd.add_argument("--allow-empty-password", action="store_true",
                        help="accept an empty password (refused otherwise)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config-reference":
        print(config.reference())
        return 0
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
    try:
        cfg = config.load(args.config, flags=args.overrides)
        password_file = config.password_file_in_force(cfg)
        if password_file is not None:
            auth.parse_password_file(password_file)
        acl_file = config.acl_file_in_force(cfg)
        if acl_file is not None:
            acl.load_acl(acl_file)  # a bad line stops the start, naming file:line
        tls.ListenerContexts(tls.settings_of(cfg))  # a certificate, key or CA file that cannot be used
        tls.https_context(cfg)
        tls.cluster_contexts(cfg)  # cluster.tls.*: the same for the cluster links
        refusal = config.default_cookie_refusal(cfg)
        if refusal is not None:
            raise config.ConfigError(refusal)
    except (config.ConfigError, auth.PasswordFileError, acl.AclError) as exc:
        print(f"vmqpy: config error: {exc}", file=sys.stderr)
        return 2
    os.umask(PRIVATE_UMASK)  # everything the node writes (data directory, database, logs, api.key) is its own
    try:
        logconfig.configure(cfg.log_format, cfg.log_level, node=cfg.nodename, file=cfg.log_file,
                            max_size=cfg.log_file_max_size, count=cfg.log_file_count)
    except OSError as exc:
        where = cfg.sources.get("log.file") or cfg.sources.get("log.console.file", "log.file")
        print(f"vmqpy: config error: {where}: cannot open the log file {cfg.log_file}: {exc.strerror}",
              file=sys.stderr)
        return 2
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
