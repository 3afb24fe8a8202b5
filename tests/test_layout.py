"""The layout of the tests: no module under tests/ imports a test module (a `test_*.py`).

A helper that two test modules share (a fake, a builder, a strategy) lives in a helper module named for what it
holds, next to the tests that use it (a fixture in a conftest.py); a test module holds tests. Importing one test
module from another makes pytest's collection of one depend on the other and hides the helper where nobody
looks for it. Every form is caught: `import tests.x.test_y`, `from tests.x.test_y import name`,
`from tests.x import test_y`, `from .test_y import name`, `from . import test_y`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def module_name(path: Path) -> str:
    """The dotted name of a module under the repository root (a package's `__init__` is the package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute(path: Path, node: ast.ImportFrom) -> str:
    """The module a `from ... import` names, a relative one resolved against the importing file's package."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()  # a module's package is its parent; a package's __init__ is its own
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def is_test_module(dotted: str) -> bool:
    """Whether `dotted` names a test module of this repository (`aiohttp.test_utils` is none of ours)."""
    return dotted.startswith("tests.") and dotted.rsplit(".", 1)[-1].startswith("test_")


def is_module_file(dotted: str) -> bool:
    """Whether `dotted` names a module file or package in this repository (not a name inside a module)."""
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of_test_modules(path: Path, source: str) -> Iterator[tuple[int, str]]:
    """(line, imported test module) for each import of a test module in `source`, the text of the file at
    `path` (which resolves its relative imports)."""
    tree = ast.parse(source, filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if is_test_module(alias.name):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = absolute(path, node)
            if is_test_module(module):
                yield node.lineno, module
                continue
            for alias in node.names:
                dotted = f"{module}.{alias.name}" if module else alias.name
                if is_test_module(dotted) and is_module_file(dotted):
                    yield node.lineno, dotted


def test_no_module_under_tests_imports_a_test_module() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: imports {imported}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, imported in imports_of_test_modules(path, path.read_text(encoding="utf-8"))
    ]
    assert not found, "a test module imported from another module; move what it shares into a helper module:\n" + (
        "\n".join(found)
    )


def test_the_check_sees_every_form_of_import() -> None:
    """Each way of importing a test module is found; importing a helper module, or a `test_`-named function
    from a helper module, is not."""
    source = "\n".join([
        "import tests.unit.broker.test_purity",
        "from tests.unit.broker.test_purity import x",
        "from tests.unit.broker import test_purity",
        "from .test_purity import x",
        "from . import test_purity",
        "from .turns import Loop",
        "from tests.unit.broker.turns import test_helper",
        "from tests.unit.broker import turns",
        "from ... import test_layout",
        "from aiohttp.test_utils import TestClient",
    ])
    probe = TESTS / "unit" / "broker" / "probe.py"  # not written: its path resolves the relative imports
    assert list(imports_of_test_modules(probe, source)) == [
        *[(line, "tests.unit.broker.test_purity") for line in range(1, 6)],
        (9, "tests.test_layout"),
    ]
