"""The integration suite's lanes (tests/lanes.py): which module goes where when it runs on several workers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos import ports
from tests import lanes

FREE_MODULE = 'def test_x(broker):\n    """On 127.0.0.2 in a docstring only."""\n    assert broker.host == "127.0.0.1"'
CLUSTER_MODULE = "from tests.integration.cluster import ClusterNode\n"
BLOCK0_MODULE = CLUSTER_MODULE + 'NAME = "n3@127.0.0.13"\n'
SOURCE_MODULE = 'SOURCE = "127.0.0.50"  # a client connects from here\n'
CHAOS_MODULE = 'command = [sys.executable, "-m", "chaos", "run"]\n'
CHAOS_BASE_MODULE = CHAOS_MODULE + 'BASE = "127.0.0.31"\n'


@pytest.mark.parametrize(("source", "lane", "held"), [
    (FREE_MODULE, lanes.FREE, set()),
    (CLUSTER_MODULE, lanes.CLUSTER, set()),
    (BLOCK0_MODULE, lanes.FIXED, {lanes.BLOCK0}),
    (SOURCE_MODULE, lanes.CLUSTER, {"127.0.0.50"}),
    (CHAOS_MODULE, lanes.CLUSTER, {lanes.CHAOS}),
    (CHAOS_BASE_MODULE, lanes.CLUSTER, {lanes.CHAOS, "127.0.0.31"}),
    ('x = f"n1@127.0.0.19:{port}"\n', lanes.FIXED, {lanes.BLOCK0}),
    ('x = "127.0.0.1:1883 and 127.0.0.100"\n', lanes.CLUSTER, {"127.0.0.100"}),
    ('# a comment naming 127.0.0.12\nx = 1\n', lanes.FREE, set()),
])
def test_a_module_is_placed_by_what_its_code_names(source: str, lane: str, held: set[str]) -> None:
    assert lanes.resources_of(source) == held
    assert lanes.lane_of(source) == lane


def test_modules_holding_something_in_common_are_one_group(tmp_path: Path) -> None:
    folder = tmp_path / "integration"
    folder.mkdir()
    texts = {"test_a": BLOCK0_MODULE, "test_b": 'X = "127.0.0.19"\nY = "127.0.0.50"\n', "test_c": SOURCE_MODULE,
             "test_d": CHAOS_MODULE, "test_e": CHAOS_BASE_MODULE, "test_f": FREE_MODULE, "test_g": CLUSTER_MODULE}
    for name, text in texts.items():
        (folder / f"{name}.py").write_text(text)
    spark = tmp_path / "spark"
    spark.mkdir()
    (spark / "test_s.py").write_text('EVENTS = ["n1@127.0.0.11"]\n')  # data, not an address in use
    (spark / "test_t.py").write_text("def test_t(short_chaos_run): ...\n")
    groups = {path.stem: group for path, group in
              lanes.groups_of([*folder.glob("*.py"), *spark.glob("*.py")]).items()}
    assert groups == {"test_a": "fixed-block0", "test_b": "fixed-block0", "test_c": "fixed-block0",
                      "test_d": "fixed-chaos", "test_e": "fixed-chaos", "test_t": "fixed-chaos",
                      "test_f": "integration/test_f.py", "test_g": "integration/test_g.py", "test_s": "spark"}


def test_what_a_helper_module_names_its_importers_hold(tmp_path: Path) -> None:
    integration = tmp_path / "tests" / "integration"
    integration.mkdir(parents=True)
    (integration / "sources.py").write_text('SOURCE = "127.0.0.50"\n')
    (integration / "uses_sources.py").write_text("from tests.integration.sources import SOURCE\n")
    (integration / "test_a.py").write_text("from tests.integration.uses_sources import SOURCE\n")
    (integration / "test_b.py").write_text("from tests.integration.test_a import SOURCE\n")  # not followed
    assert lanes.module_resources(integration / "test_a.py") == {"127.0.0.50"}
    assert lanes.module_resources(integration / "test_b.py") == set()
    assert lanes.module_lane(integration / "test_a.py") == lanes.CLUSTER


@pytest.mark.parametrize(("name", "count", "index"), [("", "", 0), ("gw0", "4", 0), ("gw3", "4", 3)])
def test_the_worker_is_read_from_xdist_s_environment(monkeypatch: pytest.MonkeyPatch, name: str, count: str,
                                                   index: int) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    worker = lanes.Worker.current()
    assert worker.index == index and worker.parallel == bool(name)


def test_workers_blocks_and_chains_are_their_own() -> None:
    workers = [lanes.Worker(i, 4) for i in range(4)]
    hosts = {w.first_host(lanes.CLUSTER) for w in workers}
    chains = {w.chain(lanes.CLUSTER) for w in workers}
    assert hosts == {"127.0.1.11", "127.0.2.11", "127.0.3.11", "127.0.4.11"}
    assert chains == {"VMQPY-TEST-1", "VMQPY-TEST-2", "VMQPY-TEST-3", "VMQPY-TEST-4"}
    assert {w.first_host(lanes.FIXED) for w in workers} == {lanes.BLOCK0_FIRST_HOST}
    assert {w.chain(lanes.FIXED) for w in workers} == {lanes.BLOCK0_CHAIN}
    alone = lanes.Worker(0, 1)
    assert (alone.first_host(lanes.CLUSTER), alone.chain(lanes.CLUSTER)) == ("127.0.0.11", "VMQPY-TEST")


def test_port_slices_never_share_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[set[int]] = []
    for index in range(4):
        monkeypatch.setattr(ports, "_slice", (0, 1))
        monkeypatch.setattr(ports, "_handed_out", set())
        ports.use_slice(index, 4)
        taken = {ports.free_port("127.0.0.1") for _ in range(25)}
        assert all(port % 4 == index and port in ports.SLICE_PORTS for port in taken)
        handed.append(taken)
    assert sum(len(h) for h in handed) == len(set().union(*handed)) == 100
    with pytest.raises(ValueError):
        ports.use_slice(4, 4)


def test_the_scheduler_keeps_a_group_in_one_unit_and_sends_the_long_ones_first(tmp_path: Path) -> None:
    integration = tmp_path / "tests" / "integration"
    integration.mkdir(parents=True)
    modules = {"test_a": BLOCK0_MODULE, "test_b": 'X = "127.0.0.19"\n', "test_c": FREE_MODULE, "test_d": CLUSTER_MODULE}
    for name, text in modules.items():
        (integration / f"{name}.py").write_text(text)
    config = SimpleNamespace(rootpath=tmp_path, getvalue={"tx": ["2*popen"]}.get)
    scheduling = lanes.LaneScheduling(config)
    collection = ["tests/integration/test_c.py::test_z1", "tests/integration/test_c.py::test_z2",
                  "tests/integration/test_c.py::test_z3", "tests/integration/test_a.py::test_x",
                  "tests/integration/test_b.py::test_y[1]", "tests/integration/test_d.py::test_w"]
    units: dict[str, dict[str, bool]] = {}
    for nodeid in collection:
        units.setdefault(scheduling._split_scope(nodeid), {})[nodeid] = False
    assert list(units) == ["integration/test_c.py", "fixed-block0", "integration/test_d.py"]
    assert scheduling._split_scope("tests/unit/test_u.py::test_u") == "tests/unit/test_u.py"
    assert scheduling._rank("tests/sim/test_s.py") == len(lanes.RANKS)  # the simulations before the unit tests
    assert scheduling._rank("tests/unit/test_u.py") == len(lanes.RANKS) + 1
    sent: list[list[int]] = []

    class Worker:
        send_runtest_some = staticmethod(sent.append)

    worker = Worker()
    scheduling.workqueue.update(units)
    scheduling.registered_collections[worker] = collection
    for _ in units:
        scheduling._assign_work_unit(worker)
    assert sent == [[3, 4], [5], [0, 1, 2]]  # the fixed group, the cluster module, the single-node one


def test_the_serial_run_collects_every_serial_module() -> None:
    root = Path(__file__).resolve().parents[2]
    paths = lanes.serial_paths(root)
    assert sorted(Path(path).stem for path in paths) == sorted(lanes.SERIAL)  # none renamed away from the list
    assert all((root / path).is_file() for path in paths)
