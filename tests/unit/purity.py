"""The purity check of a SANS-I/O room (docs/architecture.md, "Sans-I/O core, thin drivers"), as
tests/unit/dvv/test_purity.py does for dvv: a pure module imports none of the modules that reach the outside world
or the clock, and importing it loads none of them.

Each room's test_purity.py names its pure modules and, for a module that breaks the rule today, the modules it
may still import and why (`Exceptions`); an exception that is no longer used fails too, so that the lists only
shrink.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: what a pure module never imports: the event loop, sockets, threads, the clock, the disk's database, TLS, processes
FORBIDDEN = frozenset({"asyncio", "socket", "selectors", "threading", "time", "sqlite3", "ssl", "subprocess"})
#: module path -> {forbidden module it imports today: why}
Exceptions = Mapping[str, Mapping[str, str]]


def forbidden_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a FORBIDDEN module in `path`, wherever written (TYPE_CHECKING included)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name.split(".")[0]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return sorted((line, module) for line, module in found if module in FORBIDDEN)


def check(modules: Iterable[str], exceptions: Exceptions) -> None:
    """Every module in `modules` (paths from the project's root) imports nothing FORBIDDEN but its exceptions."""
    failures: list[str] = []
    used: set[tuple[str, str]] = set()
    for module in modules:
        path = ROOT / module
        assert path.is_file(), f"{module} is gone: update the list of pure modules"
        allowed = exceptions.get(module, {})
        for line, imported in forbidden_imports(path):
            if imported in allowed:
                used.add((module, imported))
            else:
                failures.append(f"{module}:{line}: imports {imported} (a pure module does no I/O and reads no clock: "
                                "take `now` as an argument, let the driver do the I/O)")
    assert not failures, "\n".join(failures)
    stale = {(module, imported) for module, names in exceptions.items() for imported in names} - used
    assert not stale, f"these exceptions are no longer needed; remove them: {sorted(stale)}"


def loaded_by(modules: Iterable[str]) -> set[str]:
    """The top-level modules that importing `modules` loads in a fresh interpreter (besides what it had)."""
    names = ", ".join(modules)
    code = f"import sys; before = set(sys.modules); import {names}; print(' '.join(sorted(set(sys.modules) - before)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         cwd=ROOT)
    return {name.split(".")[0] for name in out.stdout.split()}


def check_loaded(modules: Iterable[str], allowed: Iterable[str] = ()) -> None:
    """Importing `modules` loads nothing FORBIDDEN but `allowed` (`time` is loaded before any import: not seen)."""
    loaded = loaded_by(modules) & FORBIDDEN - set(allowed)
    assert not loaded, f"importing {', '.join(modules)} loads {sorted(loaded)}"
