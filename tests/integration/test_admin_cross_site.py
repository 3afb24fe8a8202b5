"""Another web page cannot drive the admin API through the operator's browser (issue 33, finding 6).

A real node, a real headless Chromium (Selenium, the system's chromium and chromedriver) and a tiny web server
of the attacker's on two other origins: another port of the node's address (same-site, cross-origin) and another
loopback address (cross-site). The operator first opens the API in the browser with the key in the URL, as one
would answer the old HTTP basic prompt (until the fix, the node challenged with `WWW-Authenticate: Basic`, and
Chromium kept the key and sent it again on the next challenge). Then the browser opens the attacker's pages: a
form that submits itself (`POST /api/v1/log/level?level=debug`) and a `fetch` of the same request with
`credentials: "include"`. The log level is read back through the API with the key: it never changes. The
operator's own use keeps working in the same browser: the status page's login, and a `fetch` with the key in a
header from the node's own page; `vmq-admin` changes the level too.

Run under the shared lock: `flock /tmp/vmqpy-integration.lock .venv/bin/python -m pytest -q <this file>`.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_api import admin
from tests.integration.conftest import Broker, free_port, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: the attacker's second origin: another loopback address, so another site (127.0.0.1 is the node's)
OTHER_SITE_HOST = "127.0.0.2"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vmqpy_only("vmqpy's admin API"),
    pytest.mark.skipif(not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
                       reason="chromium and chromium-driver are installed by scripts/debian-deps.sh"),
]

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


# -- the node --------------------------------------------------------------------------------------------------
class AdminNode:
    def __init__(self, broker: Broker, port: int) -> None:
        self.broker = broker
        self.url = f"http://127.0.0.1:{port}"
        self.key = (broker.data_dir / "api.key").read_text().strip()

    def vmq_admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return admin(self.url, self.broker.data_dir, *args)

    def set_log_level(self, level: str) -> None:
        request = urllib.request.Request(f"{self.url}/api/v1/log/level?level={level}", method="POST",
                                         headers={"x-api-key": self.key})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200

    def refusals(self) -> int:
        """How many requests the node logged as refused because another web page sent them."""
        return self.broker.log.read_text(errors="replace").count("admin_request_from_another_page")

    def log_level(self) -> str:
        """The node's log level, read through the API with the key in a header."""
        request = urllib.request.Request(f"{self.url}/api/v1/show?log.console.level",
                                         headers={"Authorization": f"Bearer {self.key}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            (row,) = json.loads(answer.read())["table"]
        return str(row["Value"])


@pytest.fixture
def node(broker_factory: Callable[..., Broker]) -> AdminNode:
    port = free_port()
    broker = broker_factory(**{"listener.http.default": f"127.0.0.1:{port}", "log.console.level": "info"})
    wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200, 15,
               what="the admin API")
    return AdminNode(broker, port)


# -- the attacker's pages --------------------------------------------------------------------------------------
def attacker_pages(target: str) -> dict[str, str]:
    """The pages another site serves to the operator's browser; `target` is the node's URL."""
    change = f"{target}/api/v1/log/level?level=debug"
    return {
        "/form.html": f"""<!DOCTYPE html><html><head><title>form</title></head><body>
<form id="f" method="POST" action="{change}"><input type="hidden" name="x" value="1"></form>
<script>document.getElementById("f").submit();</script></body></html>""",
        "/fetch.html": f"""<!DOCTYPE html><html><head><title>fetch</title></head><body><script>
fetch("{change}", {{method: "POST", mode: "no-cors", credentials: "include"}})
  .then(function () {{ document.title = "sent"; }}, function () {{ document.title = "failed"; }});
</script></body></html>""",
    }


class AttackerSite:
    """An http.server on `host`:free port, in a thread of the test; `stop()` shuts it down."""

    def __init__(self, host: str, pages: dict[str, str]) -> None:
        class Pages(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path.split("?")[0])
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                data = (body or "not here").encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, free_port(host)), Pages)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"attacker-{host}", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def attackers(node: AdminNode) -> Iterator[list[AttackerSite]]:
    pages = attacker_pages(node.url)
    sites = [AttackerSite("127.0.0.1", pages), AttackerSite(OTHER_SITE_HOST, pages)]
    try:
        yield sites
    finally:
        for site in sites:
            site.stop()


# -- the browser -----------------------------------------------------------------------------------------------
@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1200,900", "--disable-gpu",
                     "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    driver.set_script_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def page_text(driver: Any) -> str:
    return str(driver.execute_script("return document.body ? document.body.innerText : '';"))


def operator_opens_the_api_with_the_key(driver: Any, node: AdminNode) -> None:
    """What the operator did before the attack: open the API in the browser with the key (the old basic prompt's
    answer; Chromium answers a challenge with the credentials of the URL and keeps them)."""
    driver.get(node.url.replace("http://", f"http://{node.key}:x@") + "/api/v1/cluster/show")
    wait_until(lambda: page_text(driver).strip() != "", 10, interval=0.1, what="the API's answer in the browser")


def test_another_page_cannot_change_the_log_level(node: AdminNode, attackers: list[AttackerSite],
                                                  browser: Any) -> None:
    assert node.log_level() == "info"
    operator_opens_the_api_with_the_key(browser, node)
    changed: list[str] = []  # the attacks that changed the level (each one undone, so that all are tried)
    refused = node.refusals()
    for site in attackers:
        browser.get(site.url + "/form.html")
        wait_until(lambda: browser.current_url.startswith(node.url), 10, interval=0.1,
                   what=f"the form of {site.url} submitted to the node")
        wait_until(lambda: page_text(browser).strip() != "", 10, interval=0.1, what="the node's answer to the form")
        answer = page_text(browser)
        if node.log_level() != "info":
            changed.append(f"the form of {site.url} (the node answered {answer})")
            node.set_log_level("info")
        else:  # refused for where it comes from, before its credentials are looked at
            assert "another web page" in answer, answer

        browser.get(site.url + "/fetch.html")
        wait_until(lambda: browser.title in ("sent", "failed"), 10, interval=0.1,
                   what=f"the fetch of {site.url} settled")
        if node.log_level() != "info":
            changed.append(f"the fetch of {site.url}")
            node.set_log_level("info")
        else:  # the fetch reached the node and was refused (its answer is opaque to the page)
            wait_until(lambda expected=refused + 2: node.refusals() == expected, 10, interval=0.1,
                       what=f"the node refusing the form and the fetch of {site.url}")
        refused = node.refusals()
    assert changed == [], "another web page changed the log level: " + "; ".join(changed)


def test_the_operator_still_drives_the_node(node: AdminNode, browser: Any) -> None:
    # The status page: the key typed into its form, kept in the tab, sent in a header by the page's script.
    browser.get(node.url + "/status")
    assert browser.find_element(By.ID, "login").is_displayed()
    browser.find_element(By.ID, "key").send_keys(node.key)
    browser.find_element(By.ID, "login-button").click()
    wait_until(lambda: browser.execute_script(
        "return Array.from(document.querySelectorAll('#members tbody td.ready'), e => e.textContent)") == ["yes"],
        10, interval=0.1, what="the node as a ready member on the status page")
    # The node's own page may change something with the key in a header (Origin is the node's own).
    status = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch("/api/v1/log/level?level=debug", {method: "POST",
              headers: {"Authorization": "Bearer " + sessionStorage.getItem("vmqpy.apiKey")}})
          .then(r => done(r.status), e => done(String(e)));""")
    assert status == 200
    assert node.log_level() == "debug"
    # vmq-admin, and the API with the key in a header, as before.
    changed = node.vmq_admin("log", "level", "level=warning")
    assert changed.returncode == 0, changed.stderr
    assert node.log_level() == "warning"
    node.set_log_level("info")
    assert node.log_level() == "info"
    severe = [e["message"] for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert severe == [], severe
