"""The status page (GET /status) in a real browser: headless Chromium driven by Selenium (the system's chromium
and chromedriver) against a real three-node cluster. The page loads without console errors, asks for the API key
(naming the command that makes one) and then lists three ready members with their versions under a "serving"
headline; its client counts follow real clients; when iptables cuts one node off, the split banner appears within
3 s, and it goes within 3 s of the heal. Its tables fit a 1280 px and an 800 px window with the Serving column in
view; when a node dies in stop-serving mode the headline says "not serving" and why; a node that left shows itself
as left, as its /health does. Screenshots are left in the test's tmp dir (the path is printed)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import ClusterNode, cut, heal, partition_chain
from tests.integration.conftest import wait_until
from vmqpy import BUILD, __version__

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SPLIT_BOUND_S = 3.0  # the bound for the banner to appear after the cut and to go after the heal

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vmqpy_only("vmqpy's status page"),
    pytest.mark.skipif(not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
                       reason="chromium and chromium-driver are installed by scripts/debian-deps.sh"),
    pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables is installed by make test"),
]

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1400,1000", "--disable-gpu",
                     "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


# The page re-renders its tables every second: elements are read in one script, never held across a refresh.
def texts(driver: Any, css: str) -> list[str]:
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent.trim());", css)
    return [str(text) for text in found]


def cell(driver: Any, table: str, node: str, column: str) -> str | None:
    found = texts(driver, f'#{table} tr[data-node="{node}"] td.{column}')
    return found[0] if found else None


def banner_shown(driver: Any) -> bool:
    return bool(driver.execute_script("return document.getElementById('banner').classList.contains('shown')"))


def within(bound: float, condition: Callable[[], Any], what: str) -> float:
    """Poll `condition` until true, failing after `bound` seconds; the seconds it took."""
    started = time.monotonic()
    wait_until(condition, bound, interval=0.1, what=what)
    return time.monotonic() - started


def headline(driver: Any) -> tuple[str, str]:
    """The headline's level (ok, warn, bad) and text; ("", "") before the first answer."""
    found = driver.execute_script(
        "const h = document.getElementById('headline'); return h.hidden ? ['', ''] : [h.className, h.textContent];")
    return str(found[0]), str(found[1]).strip()


def log_in(driver: Any, node: ClusterNode) -> None:
    driver.get(node.url + "/status")
    driver.find_element(By.ID, "key").send_keys(node.api_key())
    driver.find_element(By.ID, "login-button").click()


# What must hold at any window width: the page does not scroll sideways, each table fits its box (no scrolling
# inside it either), and every row's Serving cell lies inside the window.
FIT = """
const root = document.documentElement;
const out = {page: [root.scrollWidth, window.innerWidth], tables: [], serving: []};
document.querySelectorAll(".fit").forEach(box => out.tables.push([box.firstElementChild.id, box.scrollWidth,
                                                                  box.clientWidth]));
document.querySelectorAll("#nodes tbody td.serving").forEach(td => {
  const r = td.getBoundingClientRect();
  out.serving.push([td.parentElement.dataset.node, r.width > 0 && r.left >= 0 && r.right <= window.innerWidth]);
});
return out;
"""


def assert_fits(driver: Any, rows: int) -> None:
    fit = driver.execute_script(FIT)
    page_width, window_width = fit["page"]
    assert page_width <= window_width, fit
    assert all(scroll <= client for _table, scroll, client in fit["tables"]), fit
    assert len(fit["serving"]) == rows and all(inside for _node, inside in fit["serving"]), fit


def console_errors(driver: Any) -> list[str]:
    return [str(entry["message"]) for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def test_status_page_follows_the_cluster(cluster: list[ClusterNode], browser: Any, tmp_path: Path) -> None:
    n1, n2, n3 = cluster
    browser.get(n1.url + "/status")
    assert "vmqpy" in browser.title
    # Nothing is shown before the key: the page asks for it and names the command that makes one for it.
    assert browser.find_element(By.ID, "login").is_displayed()
    assert not browser.find_element(By.ID, "content").is_displayed()
    hint = " ".join(browser.find_element(By.CSS_SELECTOR, "#login label").text.split())
    assert "vmq-admin api-key create scope=status" in hint and "api-key show" not in hint, hint
    browser.find_element(By.ID, "key").send_keys(n1.api_key())
    browser.find_element(By.ID, "login-button").click()

    names = sorted(node.name for node in cluster)
    wait_until(lambda: sorted(texts(browser, "#members tbody td.name")) == names
               and texts(browser, "#members tbody td.ready") == ["yes"] * 3, 10, interval=0.1,
               what="three ready members on the page")
    wait_until(lambda: headline(browser) == ("ok", "serving: all 3 members reachable and ready"), 10,
               interval=0.1, what="the serving headline")
    # Every member reports its own version and build of its core; here all run this checkout's.
    version = f"{__version__} ({BUILD.kind})"
    wait_until(lambda: texts(browser, "#members tbody td.version") == [version] * 3, 10, interval=0.1,
               what="each member's version")
    assert texts(browser, "#members tbody td.state") == ["ready"] * 3
    assert texts(browser, "#nodes tbody td.serving") == ["yes"] * 3
    for node in cluster:
        address = cell(browser, "members", node.name, "address")
        assert address is not None and address.startswith(node.host + ":")
        incarnation = cell(browser, "members", node.name, "incarnation")
        assert incarnation is not None and incarnation.isdigit()
    policy = dict(zip(texts(browser, "#policy td:first-child"), texts(browser, "#policy td.value"), strict=True))
    assert policy["readiness"] == "all" and policy["allow_publish"] == "off"

    # Client counts follow real clients.
    reader = n1.client(client_id="page-a")
    writer = n1.client(client_id="page-b")
    n2.client(client_id="page-c")
    wait_until(lambda: (cell(browser, "nodes", n1.name, "clients-online"), cell(browser, "nodes", n2.name,
               "clients-online"), cell(browser, "nodes", n3.name, "clients-online")) == ("2", "1", "0"),
               10, interval=0.1, what="client counts 2/1/0 on the page")
    assert not banner_shown(browser)
    # Each node's sessions and messages not yet on all their queue replica nodes (queue.replicas is 2 by default)
    wait_until(lambda: [cell(browser, "nodes", n.name, "under-replicated") for n in (n1, n2, n3)] == ["0 / 0"] * 3,
               10, interval=0.1, what="the under-replicated column 0 / 0 on every node")
    # Messages in and out show as rates and in the sparklines.
    reader.subscribe("page/traffic", qos=1)
    for i in range(20):
        writer.publish("page/traffic", f"m{i}", qos=1)
    assert len(reader.collect(20)) == 20
    wait_until(lambda: any(float(rate) > 0 for rate in texts(browser, f'#nodes tr[data-node="{n1.name}"] td.rate-in')
                           if rate != "-"), 10, interval=0.1, what="n1's incoming rate above 0 on the page")
    assert texts(browser, f'#nodes tr[data-node="{n1.name}"] td.sparkline svg title')
    browser.save_screenshot(str(tmp_path / "status-page.png"))

    with partition_chain():
        cut(n3, n1)
        cut(n3, n2)
        within(SPLIT_BOUND_S, lambda: banner_shown(browser), "the split banner after the cut")
        banner = texts(browser, "#banner")[0]
        assert n3.name in banner and n1.name in banner, banner
        # Stop-serving (the default): n1 refuses new clients, and the headline says so with the node's reason.
        wait_until(lambda: headline(browser) == ("bad", f"not serving: {n3.name} unreachable, see cluster.readiness"
                                                 " (all: every member must be reachable)"), 5, interval=0.1,
                   what="the not-serving headline")
        wait_until(lambda: "netsplit detected" in " ".join(texts(browser, "#events li")), 5, interval=0.1,
                   what="the netsplit in the recent events")
        # n1 no longer shows n3's counts as if they were live, and says why.
        wait_until(lambda: cell(browser, "nodes", n3.name, "clients-online") is None, 5, interval=0.1,
                   what="n3's row gone from n1's page")
        assert n3.name in texts(browser, "#note")[0]
        browser.save_screenshot(str(tmp_path / "status-page-split.png"))
        heal()
        within(SPLIT_BOUND_S, lambda: not banner_shown(browser), "the banner gone after the heal")
    wait_until(lambda: headline(browser)[0] == "ok", 10, interval=0.1, what="the serving headline after the heal")
    wait_until(lambda: texts(browser, "#members tbody td.ready") == ["yes"] * 3, 10, interval=0.1,
               what="three ready members again")
    wait_until(lambda: "netsplit resolved" in " ".join(texts(browser, "#events li")), 5, interval=0.1,
               what="the heal in the recent events")
    assert console_errors(browser) == []
    print(f"\nstatus page screenshots: {tmp_path / 'status-page.png'}, {tmp_path / 'status-page-split.png'}")


def test_the_tables_fit_the_window_and_a_dead_node_stops_the_serving(cluster: list[ClusterNode], browser: Any,
                                                                     tmp_path: Path) -> None:
    n1, n2, n3 = cluster
    browser.set_window_size(1280, 900)
    log_in(browser, n1)
    wait_until(lambda: texts(browser, "#nodes tbody td.serving") == ["yes"] * 3, 10, interval=0.1,
               what="three serving rows")
    assert_fits(browser, 3)
    browser.save_screenshot(str(tmp_path / "status-page-1280.png"))
    browser.set_window_size(800, 900)
    wait_until(lambda: browser.execute_script("return window.innerWidth") <= 800, 5, interval=0.1,
               what="the narrow window")
    assert_fits(browser, 3)
    browser.save_screenshot(str(tmp_path / "status-page-800.png"))
    browser.set_window_size(1280, 900)

    n3.kill9()  # stop-serving (the default): the members that remain refuse new clients
    wait_until(lambda: headline(browser) == ("bad", f"not serving: {n3.name} unreachable, see cluster.readiness"
                                             " (all: every member must be reachable)"), 10, interval=0.1,
               what="the not-serving headline")
    wait_until(lambda: texts(browser, "#nodes tbody td.serving") == ["no"] * 2, 10, interval=0.1,
               what="n1 and n2 not serving")
    assert cell(browser, "members", n3.name, "state") == "unreachable"
    assert cell(browser, "members", n2.name, "state") == "not ready"
    status, body = n1.health()
    assert status == 503 and n3.name in body["reason"], body  # the page and /health say the same
    assert_fits(browser, 2)
    browser.save_screenshot(str(tmp_path / "status-page-down.png"))
    print(f"\nstatus page screenshots in {tmp_path}")


def test_a_node_that_left_shows_as_left(pair: list[ClusterNode], browser: Any, tmp_path: Path) -> None:
    n1, n2 = pair
    log_in(browser, n2)
    wait_until(lambda: headline(browser)[0] == "ok", 10, interval=0.1, what="the serving headline")
    answer = n1.admin("cluster", "leave", f"node={n2.name}")
    assert answer.returncode == 0, answer.stderr
    # n2's own page: left, not ready, not serving, as its /health answers
    wait_until(lambda: cell(browser, "members", n2.name, "state") == "left", 15, interval=0.1,
               what="n2 shown as left on its own page")
    assert cell(browser, "members", n2.name, "ready") == "no"
    status, body = n2.health()
    assert status == 503 and "left its cluster" in body["reason"], body
    wait_until(lambda: headline(browser) == ("bad", f"not serving: {body['reason']}"), 5, interval=0.1,
               what="the headline of a node that left")
    wait_until(lambda: texts(browser, "#nodes tbody td.serving") == ["no"], 5, interval=0.1,
               what="n2 not serving")
    browser.save_screenshot(str(tmp_path / "status-page-left.png"))
    # n1's page: n2 is no longer a member, and the events say it left
    log_in(browser, n1)
    wait_until(lambda: texts(browser, "#members tbody td.name") == [n1.name]
               and "member left" in " ".join(texts(browser, "#events li")), 10, interval=0.1,
               what="n2 gone from n1's members, and its leaving in the events")
    assert headline(browser) == ("ok", f"serving: {n1.name} is the only member")
    assert console_errors(browser) == []


def test_a_wrong_key_is_refused_and_status_public_needs_none(tmp_path: Path, browser: Any) -> None:
    closed = ClusterNode(1, tmp_path / "closed").start()
    try:
        browser.get(closed.url + "/status")
        browser.find_element(By.ID, "key").send_keys("not-the-key")
        browser.find_element(By.ID, "login-button").click()
        wait_until(lambda: "refused" in browser.find_element(By.ID, "error").text, 10, interval=0.1,
                   what="the page says the key was refused")
        assert not browser.find_element(By.ID, "content").is_displayed()
        # The browser reports the refused request itself, and nothing else.
        assert [("401" in line and "/status.json" in line) for line in console_errors(browser)] == [True]
    finally:
        closed.stop()
    opened = ClusterNode(2, tmp_path / "open", {"status.public": "on"}).start()
    try:
        browser.get(opened.url + "/status")
        wait_until(lambda: texts(browser, "#members tbody td.name") == [opened.name], 10, interval=0.1,
                   what="the member listed without a key")
        assert not browser.find_element(By.ID, "login").is_displayed()
        assert console_errors(browser) == []
    finally:
        opened.stop()
