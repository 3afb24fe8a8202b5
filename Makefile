# The two commands a new user runs: `make demo` (the main job) and `make test` (the test suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: native demo demo-stop test test-long venv debian-deps lint typecheck pytest pytest-prepare pytest-run bench bench-deps chaos clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python setup.cfg setup.py pyproject.toml Makefile
	$(BIN)/pip install -q -e '.[test,analytics,chaos,bench]'
	touch $(STAMP)

venv: $(STAMP)

# The compiled core (vmqpy/native.py): the install compiles it; this builds it again in place when a compiled
# module's source has changed since (or says why the core runs pure).
native: venv
	@$(BIN)/python -m vmqpy.native_ensure

debian-deps:
	PY=$(PY) bash scripts/debian-deps.sh

demo: debian-deps venv native
	bash scripts/demo.sh

# Stops the cluster `make demo` left running (by the PIDs it wrote in demo-data/pids).
demo-stop:
	bash scripts/demo.sh stop

lint: venv
	$(BIN)/ruff check vmqpy dvv admin chaos spark_analytics tests bench setup.py

TYPED := dvv vmqpy admin chaos tests/unit
typecheck: venv
	$(BIN)/mypy --strict $(TYPED)

# Three runs. First every test but the `serial` ones on TEST_WORKERS pytest-xdist workers (more workers than cores: the
# integration tests mostly wait on node processes, and the pure tests of tests/unit and tests/sim, CPU-bound, fill
# that time), whole modules per worker, each worker with its own loopback block, iptables chain and port slice, the
# modules that name fixed addresses one after another (tests/lanes.py), on the compiled core (vmqpy/native.py); then
# the compiled modules' unit tests again on the pure modules; then the `serial` modules, which measure a
# client's latency or the broker's CPU, alone (only their files are collected: `tests.lanes serial-paths`). All three
# always run; the target fails if either does.
# Before them (`pytest-prepare`) the sources are compiled to bytecode, and the test modules' assertion rewriting
# (pytest's, cached in __pycache__) is done once: every node process, `vmq-admin` call and chaos run is a new
# interpreter, and every pytest process collects every test module, each of which otherwise compiles or rewrites
# again what it imports when bytecode is not written (PYTHONDONTWRITEBYTECODE, as on CI): ~0.25 s of CPU per node
# start, ~8 s per pytest process (7 of them).
# TEST_PROFILE (tests/randomness.py): `ci`, derandomized (hypothesis draws the same examples on every machine, seeded
# tests run their fixed seeds), so a green `make test` here is green on the next clone; `long` is `make test-long`'s.
PURE_TESTS := tests/unit tests/sim
# The unit tests of the modules the compiled build compiles (vmqpy/native.py), run a second time on their pure
# sources, the reference and the fallback.
PURE_CORE_TESTS := tests/unit/mqtt tests/unit/broker tests/unit/sessions tests/unit/test_native.py tests/unit/test_native_inits.py
BYTECODE := vmqpy dvv admin chaos spark_analytics bench tests
TEST_PROFILE ?= ci
TEST_WORKERS ?= 7
pytest-prepare: venv
	@$(BIN)/python -m compileall -q -j 2 $(BYTECODE) >/dev/null || true  # a module that does not compile fails in pytest
	@env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -p no:cacheprovider --collect-only tests >/dev/null \
		|| true  # a module that does not import fails in the runs below, with its error

pytest-run: venv
	@export TEST_PROFILE=$(TEST_PROFILE) TEST_EXPECT_BUILD=compiled; status=0; \
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=25 -n $(TEST_WORKERS) --dist loadscope \
		-m "not serial" tests || status=$$?; \
	echo "the compiled core's unit tests again, on the pure modules (VMQPY_PURE=1)"; \
	VMQPY_PURE=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 -m "not serial" $(PURE_CORE_TESTS) \
		|| status=$$?; \
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 -m serial \
		$$($(BIN)/python -m tests.lanes serial-paths) || status=$$?; \
	exit $$status

pytest: pytest-prepare pytest-run

# The type check runs beside pytest-prepare (each uses one core); its output is shown when both are done.
test: debian-deps venv native lint
	@$(BIN)/mypy --strict $(TYPED) > $(VENV)/typecheck.out 2>&1 & checking=$$!; \
	$(MAKE) --no-print-directory pytest-prepare; prepared=$$?; \
	wait $$checking; typed=$$?; echo "$(BIN)/mypy --strict $(TYPED)"; cat $(VENV)/typecheck.out; \
	[ $$typed = 0 ] && [ $$prepared = 0 ]
	@$(MAKE) --no-print-directory pytest-run

# The long runs left out of `make test` (README): the pure tests under the randomized profile (new hypothesis
# examples and simulation seeds each run, 500 examples per property that sets no count of its own), the report on a standalone Spark cluster, a whole tiny `make bench`,
# the whole model check (every scope, docs/replication.md section 10), 30 leave/rejoin cycles (docs/cluster.md),
# the one-hour soak (docs/operations.md "The soak test": series, slopes and plot in soak-artifacts/).
test-long: debian-deps venv
	TEST_PROFILE=long $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist worksteal $(PURE_TESTS)
	LONG_TESTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/test_spark_cluster.py tests/integration/test_bench_suite.py
	MODELCHECK_FULL=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist worksteal tests/sim/test_modelcheck.py
	LEAVE_CYCLES=30 $(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/test_leave.py -k cycles
	SOAK_SECONDS=3600 SOAK_ARTIFACTS=soak-artifacts $(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/test_soak.py

# The chaos suite (docs/chaos.md): every experiment of the suite, in MODE (stop-serving, trade-consistency,
# majority), on NODES nodes from address BASE; the runs land in chaos-runs/MODE/.
MODE ?= stop-serving
NODES ?= 3
BASE ?= 127.0.0.11
chaos: debian-deps venv
	$(BIN)/python -m chaos run --all --mode $(MODE) --nodes $(NODES) --base-address $(BASE) --out chaos-runs/$(MODE)

# The whole bench set (bench/README.md): message scenarios and idle connections side by side with Mosquitto,
# the cost curves at small sizes; one table, and a dated summary JSON in bench/results/. BENCH_ARGS=--quick: ~3 min.
BENCH_ARGS ?=
bench: debian-deps venv bench-deps
	$(BIN)/python -m bench.suite $(BENCH_ARGS)

# aedes (Node.js), the third broker of bench.compare: its packages into bench/aedes/node_modules (git-ignored), from
# the npm registry, once. Without node/npm it says so and succeeds: the benches then run without aedes.
bench-deps:
	@if [ -f bench/aedes/node_modules/aedes/package.json ]; then :; \
	elif ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		echo "bench-deps: node/npm not installed (apt-get install nodejs npm): the benches run without aedes"; \
	else \
		cd bench/aedes && { npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund \
			--loglevel=error || echo "bench-deps: npm could not install aedes: the benches run without aedes"; }; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info vmqpy_*__mypyc*.so vmqpy/native_manifest.json
	find vmqpy -name '*.so' -delete
