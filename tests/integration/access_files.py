"""Password and ACL files for tests of who may do what: made as an operator makes them (`vmqpy passwd`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import REPO

__all__ = ["write_access_files"]


def write_access_files(directory: Path, acl: str, users: dict[str, str]) -> tuple[Path, Path]:
    """`directory`/vmq.acl holding `acl` and `directory`/vmq.passwd holding `users` (name -> password), added with
    the real `vmqpy passwd` (the password on standard input). (acl file, password file)."""
    directory.mkdir(parents=True, exist_ok=True)
    acl_file, passwd = directory / "vmq.acl", directory / "vmq.passwd"
    acl_file.write_text(acl)
    for user, password in users.items():
        done = subprocess.run([sys.executable, "-m", "vmqpy", "passwd", str(passwd), user], input=password + "\n",
                              capture_output=True, text=True, timeout=30, cwd=REPO)
        assert done.returncode == 0, done.stderr
    return acl_file, passwd
