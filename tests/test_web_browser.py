"""The dashboard as a person uses it: the real `sqlq web` server (a process of its own)
and a real headless Chromium (tests/browser.py).  Under CI a missing browser fails
these tests, never skips them (tests/needs.py).
"""

from __future__ import annotations

import base64
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import browser
import pytest
from needs import need

import sqlq

pytestmark = pytest.mark.processes

XSS = "<img src=x onerror=alert(1)>"
TOKEN = "a-token-for-the-browser-test"


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    need(browser.missing() is None, str(browser.missing()))
    with browser.chromium() as d:
        yield d


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A database with a queue of waiting tasks and a dead one, and a queue with a task
    whose id and payload are HTML."""
    path = str(tmp_path / "jobs.db")
    with sqlq.Queue(path, lease_seconds=30, max_attempts=1, queue="emails") as q:
        q.add("broken-1", payload={"to": "a@example.com"})
        lease = q.claim()
        assert lease is not None
        q.fail(lease.task_id, token=lease.token, error="SMTP 554")
        q.add_many([f"welcome-{n}" for n in range(3)])
    with sqlq.Queue(path, lease_seconds=30, max_attempts=1, queue="html") as q:
        q.add(XSS, payload={"comment": XSS}, name="moderate")
    return path


def _follow(driver: Any, element: Any) -> None:
    """Click a link or a form's button, and wait until the browser shows the next page:
    a click returns once the click is sent, and the page it leads to may load later.

    The old page is marked with a window property that the next document lacks.  While
    the browser swaps documents, chromedriver may answer with errors other than "stale
    element" (for example "Node with given id does not belong to the document"); those
    mean "not yet" and the wait asks again."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("window.sqlqOldPage = true")
    element.click()
    WebDriverWait(driver, 30, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return window.sqlqOldPage === undefined && document.readyState === 'complete'"
        )
    )


def _by_id(driver: Any, element_id: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id)


def _rows(driver: Any, table: str) -> list[str]:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")
    return [row.get_attribute("data-task") or row.get_attribute("data-queue") for row in rows]


def _no_alert(driver: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018  (raises when no alert is open)


def test_load_filter_open_and_redrive(driver: Any, db: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with browser.server(db) as url:
        driver.get(url + "/")
        assert _rows(driver, "queues") == ["emails", "html"]
        _follow(driver, driver.find_element(By.LINK_TEXT, "Tasks"))
        filters = _by_id(driver, "filters")
        filters.find_element(By.NAME, "queue").send_keys("emails")
        Select(filters.find_element(By.NAME, "state")).select_by_visible_text("DEAD")
        _follow(driver, filters.find_element(By.CSS_SELECTOR, "button[type=submit]"))
        assert _rows(driver, "tasks") == ["broken-1"]
        _follow(driver, driver.find_element(By.LINK_TEXT, "broken-1"))
        assert _by_id(driver, "task-state").text == "DEAD"
        assert "SMTP 554" in _by_id(driver, "last-error").text
        _follow(driver, driver.find_element(By.CSS_SELECTOR, "button[value=redrive]"))
        assert "AVAILABLE again" in _by_id(driver, "message").text
        _follow(driver, driver.find_element(By.LINK_TEXT, "broken-1"))
        assert _by_id(driver, "task-state").text == "AVAILABLE"
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="emails") as q:
        assert q.status("broken-1") == "AVAILABLE"


def test_a_purge_asks_before_it_deletes(driver: Any, db: str) -> None:
    from selenium.webdriver.common.by import By

    with browser.server(db) as url:
        driver.get(url + "/dead?queue=emails")
        _follow(driver, driver.find_element(By.XPATH, "//button[starts-with(., 'Purge all dead')]"))
        assert "will be deleted" in _by_id(driver, "confirm-what").text
        with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="emails") as q:
            assert q.status("broken-1") == "DEAD"
        _follow(driver, _by_id(driver, "confirm"))
        assert "1 dead task(s)" in _by_id(driver, "message").text
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="emails") as q:
        assert q.status("broken-1") is None


def test_read_only_shows_no_action_and_refuses_a_forged_post(driver: Any, db: str) -> None:
    from selenium.webdriver.common.by import By

    with browser.server(db, "--read-only") as url:
        for path in ("/", "/dead?queue=emails", "/task?queue=emails&id=broken-1"):
            driver.get(url + path)
            assert _by_id(driver, "read-only").text == "read-only"
            assert driver.find_elements(By.CSS_SELECTOR, "form[method=post]") == [], path
        form = urllib.parse.urlencode({"queue": "emails", "task_id": "broken-1"}).encode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/actions/redrive", data=form, timeout=30)
        assert refused.value.code == 403
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="emails") as q:
        assert q.status("broken-1") == "DEAD"


def test_a_payload_of_html_renders_as_text(driver: Any, db: str) -> None:
    from selenium.webdriver.common.by import By

    with browser.server(db) as url:
        driver.get(url + "/tasks?queue=html")
        assert _rows(driver, "tasks") == [XSS]
        _follow(driver, driver.find_element(By.LINK_TEXT, XSS))
        assert _by_id(driver, "task-id").text == XSS
        assert XSS in _by_id(driver, "payload").text
        assert driver.find_elements(By.TAG_NAME, "img") == []
        _no_alert(driver)


def test_a_request_without_the_token_is_refused_on_a_non_local_bind(driver: Any, db: str) -> None:
    from selenium.webdriver.common.by import By

    with browser.server(db, "--token", TOKEN, host="0.0.0.0") as url:
        driver.get(url + "/")  # refused: the browser asks for the token (basic auth)
        assert driver.find_elements(By.ID, "queues") == []
        assert "emails" not in driver.page_source
        # Basic auth, as a browser sends it once its user has typed the token.  Sent from
        # the first request on (Chrome's own answer to a 401 with credentials in the URL
        # is a second navigation, which chromedriver's get() sometimes returned before).
        basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()
        driver.execute_cdp_cmd("Network.enable", {})
        try:
            driver.execute_cdp_cmd(
                "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {basic}"}}
            )
            driver.get(url + "/")
            assert _rows(driver, "queues") == ["emails", "html"], driver.page_source
        finally:
            driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/api/queues", timeout=30)
        assert refused.value.code == 401


def test_the_charts_draw_the_throughput_and_the_oldest_wait(driver: Any, db: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def drawn(which: str) -> Any:
        def check(d: Any) -> bool:
            section = d.find_element(By.ID, "charts")
            assert section.get_attribute("data-error") is None, section.get_attribute("data-error")
            return section.get_attribute("data-drawn") == which

        return check

    def spans_the_window(seconds: int) -> None:
        """Both charts' time axes show the window that ends now, points or none (an
        age chart without points once spanned Feb 2027 - Aug 2029)."""
        now = time.time()
        for chart in ("throughput-chart", "age-chart"):
            plot = driver.find_element(By.CSS_SELECTOR, f"#{chart} .uplot")
            span = plot.get_attribute("data-x-range")
            assert span, f"{chart}: uPlot set no time scale (it then makes one up)"
            low, high = map(float, span.split())
            assert now - seconds - 120 <= low <= now - seconds + 60, (chart, low, now)
            assert now - 120 <= high <= now + 60, (chart, high, now)

    with browser.server(db) as url:
        driver.get(url + "/")
        WebDriverWait(driver, 30).until(drawn("emails/hour"))
        throughput = driver.find_element(By.CSS_SELECTOR, "#throughput-chart .uplot")
        assert throughput.get_attribute("data-points") == "61"  # a minute each, and now's
        assert driver.find_elements(By.CSS_SELECTOR, "#age-chart canvas")
        spans_the_window(3600)
        # The next answers as a dashboard that has sampled no age yet sees them: no point.
        driver.execute_script("""
            var fetched = window.fetch;
            window.fetch = function () {
              return fetched.apply(this, arguments).then(function (response) {
                return response.json().then(function (answer) {
                  answer.age_times = []; answer.ages = [];
                  return { ok: true, json: function () { return answer; } };
                });
              });
            };""")
        Select(
            driver.find_element(By.CSS_SELECTOR, "#chart-choice [name=window]")
        ).select_by_visible_text("day")
        WebDriverWait(driver, 30).until(drawn("emails/day"))
        throughput = driver.find_element(By.CSS_SELECTOR, "#throughput-chart .uplot")
        assert throughput.get_attribute("data-points") == "1441"
        ages = driver.find_element(By.CSS_SELECTOR, "#age-chart .uplot")
        assert ages.get_attribute("data-points") == "0"
        if os.environ.get("SQLQ_TEST_SCREENSHOT"):  # to look at it: a path for the PNG
            driver.execute_script("arguments[0].scrollIntoView()", ages)
            ages.screenshot(os.environ["SQLQ_TEST_SCREENSHOT"])
        spans_the_window(86400)
        Select(
            driver.find_element(By.CSS_SELECTOR, "#chart-choice [name=queue]")
        ).select_by_visible_text("html")
        WebDriverWait(driver, 30).until(drawn("html/day"))
        spans_the_window(86400)
        _no_alert(driver)


def test_the_workers_page_shows_a_worker_and_what_it_holds(
    driver: Any, db: str, tmp_path: Path
) -> None:
    """A real `sqlq worker` that holds a task (its handler waits for a file): the Workers
    page, reached from the nav, lists it with its pid and the task, linked to its page."""
    import signal
    import subprocess
    import sys

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    release = tmp_path / "release"
    (tmp_path / "handlers.py").write_text(
        "import os, time\n"
        "def hold(path):\n"
        "    while not os.path.exists(path):\n"
        "        time.sleep(0.01)\n"
    )
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="reports") as q:
        q.add("report-1", payload=str(release))
    worker = subprocess.Popen(
        [sys.executable, "-m", "sqlq", "worker", db, "handlers:hold", "--queue", "reports",
         "--lease", "3"],
        cwd=tmp_path, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with browser.server(db) as url:
            driver.get(url + "/")
            _follow(driver, driver.find_element(By.LINK_TEXT, "Workers"))

            def holding(d: Any) -> bool:  # its next heartbeat writes the task it holds
                if d.find_elements(By.LINK_TEXT, "report-1"):
                    return True
                d.refresh()
                return False

            WebDriverWait(driver, 60).until(holding)
            [row] = driver.find_elements(By.CSS_SELECTOR, "#workers tbody tr")
            cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            assert cells[:4] == ["reports", os.uname().nodename, str(worker.pid), "1/1"]
            assert "stale" not in row.text.lower()
            _follow(driver, driver.find_element(By.LINK_TEXT, "report-1"))
            assert _by_id(driver, "task-state").text == "RESERVED"
    finally:
        release.touch()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
