"""`python -m vmqpy.native_ensure` (the Makefile, before the demo and the tests): builds the compiled core in place
when the checkout's build is missing or stale (vmqpy/native.py), or says which build runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vmqpy import native


def ensure(root: Path = native.ROOT) -> int:
    """`python -m vmqpy.native_ensure` (the Makefile, before the demo and the tests): builds the compiled core in
    place when the checkout's build is missing or stale, unless VMQPY_PURE is set. Returns the build's exit code."""
    build = native.examine(root=root)
    if build.compiled or native.pure_requested() or not (root / "setup.py").exists():
        print(f"vmqpy: {build.describe()}")
        return 0
    print(f"vmqpy: building the compiled core ({build.reason})", flush=True)
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=root, check=False,
                          stdout=subprocess.DEVNULL)
    if done.returncode == 0:
        print(f"vmqpy: {native.examine(root=root).describe()}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(ensure())
