"""vmqpy/native.py: which build of the core runs, and the pure modules as the fallback."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from vmqpy import native

MODULE = native.COMPILED[0]


def _layout(root: Path, *, manifest: bool = True, extension: bool = True) -> Path:
    """A checkout under `root` holding every module of COMPILED as a source, optionally its extension module
    (an empty file: examine only looks for it) and the manifest of those sources."""
    for module in native.COMPILED:
        source = native.source_path(module, root)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {module}\n")
        if extension:
            source.with_name(source.stem + EXTENSION_SUFFIXES[0]).write_bytes(b"")
    if manifest:
        digests = native.manifest_for(native.COMPILED, root)
        (root / "vmqpy" / native.MANIFEST).write_text(json.dumps({"sources": digests}))
    return native.source_path(MODULE, root)


def test_a_build_whose_manifest_matches_its_sources_runs_compiled(tmp_path: Path) -> None:
    _layout(tmp_path)
    build = native.examine({}, tmp_path)
    assert build.compiled
    assert build.describe() == f"compiled core (mypyc, {len(native.COMPILED)} modules)"


@pytest.mark.parametrize(("environ", "compiled"), [({"VMQPY_PURE": "1"}, False), ({"VMQPY_PURE": "0"}, True),
                                                   ({"VMQPY_PURE": ""}, True), ({"VMQPY_PURE": "yes"}, False)])
def test_vmqpy_pure_asks_for_the_pure_modules(tmp_path: Path, environ: dict[str, str], compiled: bool) -> None:
    _layout(tmp_path)
    assert native.examine(environ, tmp_path).compiled is compiled


def test_without_a_manifest_the_core_is_pure(tmp_path: Path) -> None:
    _layout(tmp_path, manifest=False)
    assert native.examine({}, tmp_path).reason.startswith("not compiled")


def test_an_edited_source_makes_the_build_stale_and_the_core_pure(tmp_path: Path) -> None:
    source = _layout(tmp_path)
    source.write_text(source.read_text() + "# edited\n")
    build = native.examine({}, tmp_path)
    assert not build.compiled
    assert build.reason == f"stale: {MODULE} changed since the build; run make"


def test_a_missing_extension_makes_the_core_pure(tmp_path: Path) -> None:
    source = _layout(tmp_path)
    source.with_name(source.stem + EXTENSION_SUFFIXES[0]).unlink()
    assert native.examine({}, tmp_path).reason == f"not compiled: no extension for {MODULE}"


def test_a_manifest_of_another_list_of_modules_is_stale(tmp_path: Path) -> None:
    _layout(tmp_path)
    manifest = tmp_path / "vmqpy" / native.MANIFEST
    recorded = json.loads(manifest.read_text())
    del recorded["sources"][MODULE]
    manifest.write_text(json.dumps(recorded))
    assert native.examine({}, tmp_path).reason.startswith("stale: the compiled modules' list changed")


def test_an_unreadable_manifest_is_said(tmp_path: Path) -> None:
    _layout(tmp_path)
    (tmp_path / "vmqpy" / native.MANIFEST).write_text("{not json")
    assert native.examine({}, tmp_path).reason.startswith(f"unreadable {native.MANIFEST}")


def test_an_extension_not_allowed_to_run_is_passed_over_for_its_source(tmp_path: Path) -> None:
    """An extension module beside a source, of the pure build or left over from an earlier build's list: the
    finder gives the source; a module allowed to run compiled is left to the normal import."""
    package = tmp_path / "vmqpy"
    package.mkdir()
    (package / "leftover.py").write_text("")
    (package / ("leftover" + EXTENSION_SUFFIXES[0])).write_bytes(b"")
    finder = native._FromSource(frozenset({"vmqpy.allowed"}))
    spec = finder.find_spec("vmqpy.leftover", [str(package)])
    assert spec is not None and spec.origin == str(package / "leftover.py")
    assert finder.find_spec("vmqpy.allowed", [str(package)]) is None
    assert finder.find_spec("other.leftover", [str(package)]) is None


def _loaded_from(environ: dict[str, str]) -> list[str]:
    """Where a fresh interpreter loads the modules of COMPILED from, and which build it says it runs."""
    code = ("import importlib, vmqpy; from vmqpy import native\n"
            "print(vmqpy.BUILD.kind)\n"
            "for m in native.COMPILED: print(importlib.import_module(m).__file__)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **environ}, capture_output=True,
                          text=True, check=True, timeout=60)
    return done.stdout.split()


def test_vmqpy_pure_loads_every_module_of_the_core_from_source() -> None:
    kind, *files = _loaded_from({"VMQPY_PURE": "1"})
    assert kind == "pure"
    assert all(f.endswith(".py") for f in files), files


def test_the_compiled_build_loads_every_module_of_the_core_compiled() -> None:
    """In `make test` (TEST_EXPECT_BUILD=compiled, set by the Makefile) the compiled build must be the one that
    runs; elsewhere this checks whichever build this checkout has. Under VMQPY_PURE=1 the test process itself runs
    the pure modules, and this still checks the compiled ones."""
    checkout = native.examine({})  # this checkout's build, whatever VMQPY_PURE this test runs under
    if os.environ.get("TEST_EXPECT_BUILD") == "compiled":
        assert checkout.compiled, checkout.describe()
    kind, *files = _loaded_from({"VMQPY_PURE": ""})
    assert kind == checkout.kind
    assert all(f.endswith(".py") is (kind == "pure") for f in files), files


def test_compiled_modules_read_the_clocks_through_names_of_their_own() -> None:
    """Compiled, `time.time()` on an `import time` is bound to the real module: replacing the module's `time`
    attribute (what the whole-cluster simulation does to put a node on its virtual clock, tests/sim/cluster/
    virtual.py) does not reach it, while a name of the module's own (`from time import time as wall_clock`) is
    looked up at each call and is replaced. A clock read as `time.X(...)` in a compiled module would make the
    simulation's histories depend on the build and on the real time."""
    found = []
    for module in native.COMPILED:
        path = native.source_path(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "time"):
                found.append(f"{path.relative_to(native.ROOT)}:{node.lineno}: time.{node.func.attr}()")
    assert not found, found
