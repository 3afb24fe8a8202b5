"""dvv is a pure library: it imports only the standard library's data-structure modules and msgpack."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import dvv

PACKAGE = Path(dvv.__file__).parent
ALLOWED = {"__future__", "bisect", "collections", "dataclasses", "itertools", "re", "typing", "msgpack", "dvv"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_sources_import_only_allowed_modules() -> None:
    sources = sorted(PACKAGE.glob("*.py"))
    assert len(sources) >= 9
    for path in sources:
        extra = imported_roots(path) - ALLOWED
        assert not extra, f"{path.name} imports {sorted(extra)}"


def test_importing_dvv_pulls_in_no_io_or_project_modules() -> None:
    code = (
        "import sys; before = set(sys.modules); import dvv, dvv.codec; "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = {name.split(".")[0] for name in out.stdout.split()}
    # (msgpack itself imports datetime for its Timestamp type, so datetime is not listed.)
    forbidden = {"asyncio", "socket", "threading", "time", "random", "selectors", "vmqpy", "tests", "bench"}
    assert not loaded & forbidden, sorted(loaded & forbidden)
    assert "dvv" in loaded and "msgpack" in loaded
