"""The build: setup.cfg holds the metadata; this file adds the compiled core (vmqpy/native.py) when it can.

The modules of vmqpy.native.COMPILED are compiled with mypyc when mypyc is importable (pyproject.toml's build
requirements bring it) and a C compiler can build against Python's headers; otherwise the install is pure Python
and says why. VMQPY_PURE=1 at install time skips the compilation. Either way the package works: vmqpy/native.py
loads the pure modules when no manifest matches the sources.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import sysconfig
import tempfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
native: dict[str, Any] = runpy.run_path(str(ROOT / "vmqpy" / "native.py"), run_name="vmqpy_native_for_setup")


def _can_compile() -> str | None:
    """None when a C compiler builds against Python's headers here, else why not."""
    if native["pure_requested"]():
        return f"{native['PURE_ENV']} is set"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed"
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.exists():
        return f"no Python headers ({header}; Debian: python3-dev)"
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.errors import CompileError, DistutilsExecError
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "probe.c"
        probe.write_text("#include <Python.h>\nint probe(void) { return 0; }\n")
        try:
            compiler.compile([str(probe)], output_dir=scratch, include_dirs=[str(header.parent)])
        except (CompileError, DistutilsExecError, OSError) as exc:
            return f"no working C compiler ({exc}; Debian: gcc)"
    return None


class ParallelBuildExt(build_ext):
    """Compiles the extension modules on every core."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


# The commands that build the package; the others (metadata, egg_info) need no compilation.
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _remove_stray_extensions(modules: set[str], rooms: set[str]) -> None:
    """Extension modules an earlier build left that this one does not make: of sources no longer compiled, the
    per-module libraries of a build before the rooms, and rooms no longer made (vmqpy/native.py would not load the
    first; removed so that nothing stale lies in the tree)."""
    for suffix in EXTENSION_SUFFIXES:
        for path in (ROOT / "vmqpy").rglob(f"*{suffix}"):
            name = path.name[: -len(suffix)]
            module = ".".join((*path.parent.relative_to(ROOT).parts, name))
            if module not in modules or name.endswith("__mypyc"):
                path.unlink()
        for path in ROOT.glob(f"vmqpy_*__mypyc{suffix}"):
            if path.name[: -len(suffix)].removesuffix("__mypyc") not in rooms:
                path.unlink()


def _extensions() -> list[Any]:
    if not BUILDS.intersection(sys.argv[1:]):
        return []
    manifest = ROOT / "vmqpy" / native["MANIFEST"]
    manifest.unlink(missing_ok=True)  # until this build has compiled, no earlier build is trusted
    why_not = _can_compile()
    if why_not is not None:
        print(f"vmqpy: installing the pure-Python core: {why_not}", file=sys.stderr)
        return []
    from mypyc.build import mypycify

    modules: tuple[str, ...] = native["COMPILED"]
    sources = [str(native["source_path"](module, ROOT).relative_to(ROOT)) for module in modules]
    # pip builds in an environment of its own that holds only the build requirements: the core's third-party
    # imports (structlog, msgpack) are not there, and mypyc treats their values as Any (generic operations, the
    # same results). In an environment that has them (`setup.py build_ext --inplace` in the venv) they are typed.
    # opt_level 1: the C compiler's -O1. Measured (docs/performance.md, "The compiled core"): the same CPU per
    # message and per connect as -O3 within the noise (mypyc's code is mostly calls into Python's C API), and the
    # build takes about a third less time.
    # One shared library per room (vmqpy.native.group_of): mypyc's runtime is linked once a room, not once a
    # module (separate=True cost 11.6 MB of RSS against the pure node's 55.7 MB; by room, 3.7), and the rooms'
    # libraries compile in parallel.
    rooms: dict[str, list[str]] = {}
    for module, source in zip(modules, sources, strict=True):
        rooms.setdefault(native["group_of"](module), []).append(source)
    _remove_stray_extensions(set(modules), set(rooms))
    # A cache of its own, new for every build: mypyc 2.4 crashed (`emit_undefined_attr_check: value is not in
    # list`) reading a cache written before a class of a compiled module gained an `__init__` of its own, and reading
    # the project's .mypy_cache after `mypy --strict` had written it with other options.
    with tempfile.TemporaryDirectory(prefix="vmqpy-mypyc-cache-") as cache:
        extensions = mypycify(["--no-warn-unused-configs", "--ignore-missing-imports", "--cache-dir", cache,
                               *sources], opt_level="1",
                              separate=[(files, name) for name, files in rooms.items()])
    manifest.write_text(json.dumps({"sources": native["manifest_for"](modules, ROOT)}, indent=1, sort_keys=True))
    return extensions


setup(ext_modules=_extensions(), cmdclass={"build_ext": ParallelBuildExt})
