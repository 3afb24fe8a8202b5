"""`python -m bench.loadgen --port P [...]`: one load generator run against a running broker (`runner.main`)."""

from __future__ import annotations

from bench.loadgen.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
