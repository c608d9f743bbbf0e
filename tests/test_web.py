"""The web dashboard (sqlq.web) through its ASGI app, on every durable backend: the JSON
API gives the CLI's --json shapes, pages filter and keyset-page the tasks, values are
escaped, access and actions are guarded.  The real server in a real browser:
test_web_browser.py.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from databases import queue_options, sqlite_only, sqlite_path
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import sqlq
from sqlq.cli import main
from sqlq.web import create_app, metrics_app

XSS = "<img src=x onerror=alert(1)>"
LOCAL = ("127.0.0.1", 50000)
#: The dashboard as a browser on this machine asks for it (the Host it checks).
HERE = "http://127.0.0.1:8470"
REMOTE = ("192.0.2.7", 50000)
TOKEN = "s3cret-token-of-the-test"


def _queue(url: str, name: str = "jobs") -> sqlq.Queue:
    return sqlq.Queue(url, lease_seconds=30, max_attempts=1, queue=name, **queue_options(url))


def _dead(q: sqlq.Queue, task_id: str) -> None:
    """Add a task and let it die (the queue's line must be empty)."""
    q.add(task_id)
    lease = q.claim()
    assert lease is not None and lease.task_id == task_id
    q.fail(task_id, token=lease.token, error=f"failed: {XSS}")


@pytest.fixture
def client(queue_url: str) -> Iterator[TestClient]:
    _queue(queue_url).close()  # the database, empty
    with TestClient(create_app(queue_url), base_url=HERE, client=LOCAL) as c:
        yield c


def _csrf(client: TestClient) -> str:
    page = client.get("/").text
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)


def _post(client: TestClient, action: str, **form: str) -> Any:
    return client.post(f"/actions/{action}", data={"csrf": _csrf(client), **form})


def test_the_api_gives_the_clis_json_shapes(
    queue_url: str, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    with _queue(queue_url) as q:
        _dead(q, "b")
        q.add("a", payload={"n": 1}, name="send", priority=3, key="user:1", group="tenant:1")
    assert main(["show", queue_url, "a", "--queue", "jobs", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["group"] == "tenant:1"
    api = client.get("/api/task", params={"queue": "jobs", "id": "a"}).json()
    assert api.pop("timeline")[0] == {"at": shown["created_at"], "what": "added"}
    assert {**api, "database": shown["database"]} == shown

    assert main(["stats", queue_url, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    queues = client.get("/api/queues").json()
    for part in ("queues", "stats"):  # the same figures (ages differ with the time read)
        for figures in stats[part].values():
            figures.pop("oldest_available_age", None)
        for figures in queues[part].values():
            figures.pop("oldest_available_age", None)
        assert queues[part] == stats[part]

    assert main(["list", queue_url, "--queue", "jobs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["tasks"]
    newest_first = client.get("/api/tasks").json()["tasks"]
    assert newest_first[::-1] == listed  # list: in the order added


def test_a_tasks_group_is_shown_and_the_list_has_a_group_column_only_with_groups(
    queue_url: str, client: TestClient
) -> None:
    with _queue(queue_url) as q:
        q.add("plain")
        header = "<th>name</th><th>group</th><th>state</th>"
        assert header not in client.get("/tasks").text  # no listed task has a group
        q.add("grouped", group="tenant:<1>")
    listed = client.get("/tasks").text
    assert header in listed
    assert '<td class="group">tenant:&lt;1&gt;</td>' in listed
    assert '<td class="group">-</td>' in listed  # the task without a group
    page = client.get("/task", params={"queue": "jobs", "id": "grouped"}).text
    assert '<td id="group">tenant:&lt;1&gt;</td>' in page
    page = client.get("/task", params={"queue": "jobs", "id": "plain"}).text
    assert '<td id="group">-</td>' in page


def test_tasks_filter_by_state_queue_name_and_id_prefix(queue_url: str, client: TestClient) -> None:
    with _queue(queue_url) as q, _queue(queue_url, "other") as other:
        q.add("img-1", name="resize")
        q.add("img-2", name="crop")
        q.add("doc-1", name="resize")
        _dead(other, "img-3")

    def ids(**params: str) -> list[str]:
        return [t["task_id"] for t in client.get("/api/tasks", params=params).json()["tasks"]]

    assert ids() == ["img-3", "doc-1", "img-2", "img-1"]  # newest first
    assert ids(queue="jobs") == ["doc-1", "img-2", "img-1"]
    assert ids(state="DEAD") == ["img-3"]
    assert ids(name="resize") == ["doc-1", "img-1"]
    assert ids(prefix="img-") == ["img-3", "img-2", "img-1"]
    assert ids(prefix="img-", queue="jobs", name="crop") == ["img-2"]
    assert ids(state="COMPLETED") == []
    page = client.get("/tasks", params={"name": "resize"}).text
    assert "doc-1" in page and "img-1" in page and "img-2" not in page


def test_pages_are_keyset_pages_in_both_orders(queue_url: str, client: TestClient) -> None:
    with _queue(queue_url) as q:
        q.add_many([f"t{i:02d}" for i in range(7)])
        lease = q.claim()  # t00 leaves the line, and comes back to its back
        assert lease is not None
        q.release(lease.task_id, lease.token)
        q.add("urgent", priority=5)  # added last, at the front of the line
        q.add("later", priority=-5)  # behind every other
    for order, expected in [
        ("newest", ["later", "urgent", *(f"t{i:02d}" for i in reversed(range(7)))]),
        ("line", ["urgent", *(f"t{i:02d}" for i in range(1, 7)), "t00", "later"]),
    ]:
        seen: list[str] = []
        after: str | None = ""
        while after is not None:
            page = client.get("/api/tasks", params={"order": order, "limit": 3, "after": after})
            seen += [t["task_id"] for t in page.json()["tasks"]]
            after = page.json()["next"]
        assert seen == expected, order
    with _queue(queue_url) as q:  # the line is the order the claims take
        assert [lease.task_id for lease in q.claim_many(9)] == seen
    html = client.get("/tasks", params={"limit": 3}).text
    assert 'id="next-page"' in html and "after=" in html


def test_bad_filters_are_refused_with_the_reason(client: TestClient) -> None:
    for params, reason in [
        ({"state": "SLEEPING"}, "no state 'SLEEPING'"),
        ({"order": "random"}, "order must be one of"),
        ({"after": "1;DROP"}, "not a page cursor"),
        ({"limit": "0"}, "limit must be"),
        ({"queue": "x" * 5000}, "queue name"),
    ]:
        answer = client.get("/api/tasks", params=params)
        assert answer.status_code == 400 and reason in answer.text, (params, answer.text)


def test_a_task_page_shows_everything_and_escapes_it(queue_url: str, client: TestClient) -> None:
    with _queue(queue_url) as q:
        _dead(q, "dead-one")
        q.add(XSS, payload={"html": XSS}, name="<b>bold</b>")
    page = client.get("/task", params={"queue": "jobs", "id": XSS}).text
    assert "<img" not in page and "<b>bold" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page  # as text: id, payload
    page = client.get("/task", params={"queue": "jobs", "id": "dead-one"}).text
    assert "failed: &lt;img" in page and "Timeline" in page and "finished (DEAD)" in page
    for path in ("/", "/tasks", "/dead"):
        assert "<img" not in client.get(path).text, path
    missing = client.get("/task", params={"queue": "jobs", "id": "nope"})
    assert missing.status_code == 404 and "no task &#39;nope&#39;" in missing.text


def test_progress_is_shown_to_three_significant_digits(queue_url: str, client: TestClient) -> None:
    with _queue(queue_url) as q:
        q.add("p")
        lease = q.claim()
        assert lease and q.progress("p", lease.token, 1 / 12, "decoding")
    for page in (
        client.get("/task", params={"queue": "jobs", "id": "p"}).text,
        client.get("/leases").text,
    ):
        assert "0.0833 decoding" in page and "0.08333" not in page


def test_every_response_carries_a_content_security_policy(client: TestClient) -> None:
    for path in ("/", "/tasks", "/api/queues", "/static/style.css", "/nowhere"):
        policy = client.get(path).headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy, path


def test_without_a_token_only_this_machine_is_served(queue_url: str) -> None:
    _queue(queue_url).close()
    with TestClient(create_app(queue_url), client=REMOTE) as remote:
        answer = remote.get("/api/queues")
    assert answer.status_code == 403 and "this machine only" in answer.text


def test_with_a_token_every_request_needs_it(queue_url: str) -> None:
    _queue(queue_url).close()
    app = create_app(queue_url, token=TOKEN)
    basic = base64.b64encode(f"anyone:{TOKEN}".encode()).decode()
    for address in (LOCAL, REMOTE):
        with TestClient(app, client=address) as c:
            refused = c.get("/")
            assert refused.status_code == 401, address
            assert refused.headers["www-authenticate"].startswith("Basic")
            assert (
                c.get("/", headers={"authorization": "Bearer wrong-token-xxxx"}).status_code == 401
            )
            assert c.get("/", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
            assert c.get("/", headers={"authorization": f"Basic {basic}"}).status_code == 200


def test_redrive_through_the_page_and_a_clear_message_when_no_longer_dead(
    queue_url: str, client: TestClient
) -> None:
    with _queue(queue_url) as q:
        _dead(q, "d1")
    done = _post(client, "redrive", queue="jobs", task_id="d1")
    assert done.status_code == 200 and "AVAILABLE again" in done.text
    with _queue(queue_url) as q:
        assert q.status("d1") == "AVAILABLE"
    again = _post(client, "redrive", queue="jobs", task_id="d1")
    assert again.status_code == 409
    assert "is not DEAD (it is AVAILABLE)" in again.text and "not redriven" in again.text


def test_destructive_actions_ask_first(queue_url: str, client: TestClient) -> None:
    with _queue(queue_url) as q:
        _dead(q, "d1")
        q.add("waiting")
    asked = _post(client, "purge", queue="jobs")
    assert asked.status_code == 200 and "Really purge?" in asked.text
    asked = _post(client, "cancel", queue="jobs", task_id="waiting")
    assert "Really cancel?" in asked.text
    with _queue(queue_url) as q:
        assert q.status("d1") == "DEAD" and q.status("waiting") == "AVAILABLE"
    assert "1 dead task(s)" in _post(client, "purge", queue="jobs", confirm="yes").text
    assert (
        "is CANCELLED"
        in _post(client, "cancel", queue="jobs", task_id="waiting", confirm="yes").text
    )
    with _queue(queue_url) as q:
        assert q.status("d1") is None and q.status("waiting") == "CANCELLED"
    gone = _post(client, "cancel", queue="jobs", task_id="waiting", confirm="yes")
    assert gone.status_code == 409 and "nothing to cancel" in gone.text


def test_pause_resume_and_add(queue_url: str, client: TestClient) -> None:
    with _queue(queue_url) as q:
        q.add("first")
    assert "is paused" in _post(client, "pause", queue="jobs").text
    assert "PAUSED" in client.get("/").text
    assert _post(client, "pause", queue="jobs").status_code == 409
    assert "runs again" in _post(client, "resume", queue="jobs").text
    added = _post(client, "add", queue="jobs", task_id="new", payload='{"n": 2}', name="x")
    assert added.status_code == 200, added.text
    with _queue(queue_url) as q:
        info = q.info("new")
        assert info is not None and info.payload == {"n": 2} and info.name == "x"
    assert _post(client, "add", queue="jobs", task_id="new").status_code == 409
    bad = _post(client, "add", queue="jobs", task_id="other", payload="{nope")
    assert bad.status_code == 400 and "InvalidPayload: not valid JSON" in bad.text


def test_actions_need_the_sessions_csrf_token_and_origin(
    queue_url: str, client: TestClient
) -> None:
    with _queue(queue_url) as q:
        _dead(q, "d1")
    token = _csrf(client)
    for form, headers in [
        ({"queue": "jobs", "task_id": "d1"}, {}),  # no token in the form
        ({"queue": "jobs", "task_id": "d1", "csrf": "forged"}, {}),
        ({"queue": "jobs", "task_id": "d1", "csrf": token}, {"origin": "https://evil.example"}),
    ]:
        answer = client.post("/actions/redrive", data=form, headers=headers)
        assert answer.status_code == 403, form
    client.cookies.clear()  # another site's request carries no (SameSite) cookie
    answer = client.post("/actions/redrive", data={"queue": "jobs", "task_id": "d1", "csrf": token})
    assert answer.status_code == 403
    with _queue(queue_url) as q:
        assert q.status("d1") == "DEAD"


def test_read_only_shows_no_action_and_refuses_them(queue_url: str) -> None:
    with _queue(queue_url) as q:
        _dead(q, "d1")
    with TestClient(create_app(queue_url, read_only=True), base_url=HERE, client=LOCAL) as c:
        for path in ("/", "/dead?queue=jobs", "/task?queue=jobs&id=d1"):
            assert "/actions/" not in c.get(path).text, path
        token = c.cookies.get("sqlq_csrf") or ""
        answer = c.post("/actions/redrive", data={"queue": "jobs", "task_id": "d1", "csrf": token})
        assert answer.status_code == 403 and "read-only" in answer.text
    with _queue(queue_url) as q:
        assert q.status("d1") == "DEAD"


def test_mounted_under_a_prefix(queue_url: str) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    with _queue(queue_url) as q:
        q.add("a")
    outer = Starlette(routes=[Mount("/ops/sqlq", create_app(queue_url))])
    with TestClient(outer, base_url=HERE, client=LOCAL) as c:
        page = c.get("/ops/sqlq/").text
        assert 'href="/ops/sqlq/static/style.css"' in page and 'href="/ops/sqlq/tasks' in page
        assert c.get("/ops/sqlq/static/style.css").status_code == 200
        assert c.get("/ops/sqlq/api/tasks").json()["tasks"][0]["task_id"] == "a"


@sqlite_only
def test_the_dashboard_reads_while_another_process_holds_the_write_lock(queue_url: str) -> None:
    with _queue(queue_url) as q:
        _dead(q, "d1")
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, sqlite_path(queue_url)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        app = create_app(queue_url)
        with TestClient(app, base_url=HERE, client=LOCAL) as c:
            assert c.get("/api/queues").json()["queues"]["jobs"]["DEAD"] == 1
            assert c.get("/api/tasks").json()["tasks"][0]["task_id"] == "d1"
            assert c.get("/api/task", params={"queue": "jobs", "id": "d1"}).status_code == 200
            assert "d1" in c.get("/dead").text
    finally:
        holder.communicate("")
    assert holder.returncode == 0


#: Holds the SQLite write lock of the file argv[1] until its stdin closes.
LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def test_sqlq_web_refuses_a_non_local_address_without_a_token(
    queue_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with _queue(queue_url) as q:
        q.add("a")
    assert main(["web", queue_url, "--host", "0.0.0.0"]) == 2
    assert "give an access token" in capsys.readouterr().err
    assert main(["web", queue_url, "--host", "0.0.0.0", "--token", "short"]) == 2
    assert "at least 16 characters" in capsys.readouterr().err


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of a scrape, parsed by prometheus-client's own parser."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_tell_what_the_database_can(queue_url: str) -> None:
    with _queue(queue_url, "late") as late:
        late.add("stuck", now=1000)
        assert late.claim(now=1000) is not None  # its lease ran out at 1030, long ago
    with _queue(queue_url) as q:
        _dead(q, "d1")
        q.add_many(["a", "b"])
        q.pause()
    before = time.time()
    with TestClient(create_app(queue_url), base_url=HERE, client=LOCAL) as c:
        scrape = c.get("/metrics")
    assert scrape.headers["content-type"].startswith("text/plain; version=")
    samples = _samples(scrape.text)
    assert samples[("sqlq_tasks", (("queue", "jobs"), ("state", "DEAD")))] == 1
    assert samples[("sqlq_tasks", (("queue", "jobs"), ("state", "AVAILABLE")))] == 2
    assert samples[("sqlq_tasks", (("queue", "late"), ("state", "RESERVED")))] == 1
    assert samples[("sqlq_queue_paused", (("queue", "jobs"),))] == 1
    assert samples[("sqlq_queue_paused", (("queue", "late"),))] == 0
    assert samples[("sqlq_lease_overdue_seconds", (("queue", "late"),))] >= before - 1030
    assert samples[("sqlq_lease_overdue_seconds", (("queue", "jobs"),))] == 0
    assert samples[("sqlq_oldest_available_age_seconds", (("queue", "jobs"),))] >= 0
    assert samples[("sqlq_oldest_available_age_seconds", (("queue", "late"),))] == 0
    wal = [value for (name, _), value in samples.items() if name == "sqlq_wal_bytes"]
    assert len(wal) == (1 if queue_url.startswith("sqlite") else 0)


@pytest.mark.processes
def test_sqlq_metrics_serves_them_alone(queue_url: str) -> None:
    import browser

    with _queue(queue_url) as q:
        q.add("a")
    with browser.server(queue_url, command="metrics") as url:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as scrape:
            samples = _samples(scrape.read().decode())
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + "/", timeout=30)
    assert samples[("sqlq_tasks", (("queue", "jobs"), ("state", "AVAILABLE")))] == 1
    assert missing.value.code == 404


def test_metrics_app_is_guarded_too(queue_url: str) -> None:
    _queue(queue_url).close()
    with TestClient(metrics_app(queue_url), client=REMOTE) as remote:
        assert remote.get("/metrics").status_code == 403


def test_charts_count_the_tasks_finished_per_minute(queue_url: str) -> None:
    with _queue(queue_url) as q:
        _dead(q, "d1")
        q.add_many(["a", "b", "c", "waits"])
        for _ in range(3):
            lease = q.claim()
            assert lease is not None
            q.complete(lease.task_id, token=lease.token)
    with TestClient(create_app(queue_url), base_url=HERE, client=LOCAL) as c:
        hour = c.get("/api/charts", params={"queue": "jobs"}).json()
        day = c.get("/api/charts", params={"queue": "jobs", "window": "day"}).json()
        bad = c.get("/api/charts", params={"queue": "jobs", "window": "week"})
    assert (sum(hour["completed"]), sum(hour["dead"]), sum(hour["cancelled"])) == (3, 1, 0)
    assert len(hour["times"]) == 61 and len(day["times"]) == 1441
    assert sum(day["completed"]) == 3
    assert hour["times"][1] - hour["times"][0] == 60
    assert len(hour["ages"]) == 1 and hour["ages"][0] >= 0  # sampled when first asked
    assert bad.status_code == 400 and "window must be one of hour, day" in bad.text


#: Runs `sqlq web` (argv[1]) in a Python where uvicorn cannot be imported.
WITHOUT_UVICORN = """
import sys
sys.modules["uvicorn"] = None  # import uvicorn raises ImportError
from sqlq.cli import main
sys.exit(main(["web", sys.argv[1]]))
"""

#: The CLI, and the demo's command, import nothing of the web extra.
CLI_ALONE = """
import sys
from sqlq.cli import main
assert main(["--help"]) == 0
extra = ("starlette", "uvicorn", "jinja2", "prometheus_client")
print(sorted(m for m in extra if m in sys.modules))
"""


@pytest.mark.processes
def test_without_the_web_extra_sqlq_web_says_what_to_install(queue_url: str) -> None:
    _queue(queue_url).close()
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_UVICORN, queue_url], capture_output=True, text=True
    )
    assert run.returncode == 1, run.stderr
    assert "needs the web extra (uvicorn is missing): pip install 'sqlq-queue[web]'" in run.stderr
    alone = subprocess.run([sys.executable, "-c", CLI_ALONE], capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.splitlines()[-1] == "[]"


@sqlite_only
def test_the_counts_read_through_the_indexes_match_the_rows(queue_url: str) -> None:
    """SQLite's overview counts each state through its partial index (fast on 10^6
    finished tasks); a state no index covers (a newer schema's) is still counted."""
    import sqlite3

    from sqlq.backends import open_backend

    with _queue(queue_url) as q:
        _dead(q, "dead")
        q.add_many(["done", "running", "cancelled", "available"])
        q.add("waiting", delay=3600)
        for task_id in ("done", "running"):
            lease = q.claim()
            assert lease is not None and lease.task_id == task_id
        q.complete("done")
        q.cancel("cancelled")
    path = sqlite_path(queue_url)

    def counted() -> dict[str, int]:
        backend = open_backend(queue_url, migrate=False)
        try:
            return backend.overview(with_names=False)["jobs"].counts
        finally:
            backend.close()

    expected = {
        s: 1 for s in ("WAITING", "AVAILABLE", "RESERVED", "COMPLETED", "DEAD", "CANCELLED")
    }
    assert counted() == expected
    with sqlite3.connect(path) as conn:  # a row of a state this version does not know
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(
            "INSERT INTO sqlq_tasks (queue, task_id, state, seq, attempts, max_attempts, "
            "created_at, updated_at) VALUES ('jobs', 'future', 'BLOCKED', 999, 0, 1, 0, 0)"
        )
    conn.close()
    assert counted() == {**expected, "BLOCKED": 1}


def _api(client: TestClient, action: str, body: Any, **headers: str) -> Any:
    """A script's JSON POST to an action of the API."""
    return client.post(f"/api/actions/{action}", content=json.dumps(body), headers={
        "content-type": "application/json", **headers,
    })  # fmt: skip


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


def test_the_api_actions_answer_as_the_cli_does(
    queue_url: str, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each action through the API, after the CLI's command of the same name on a twin
    # task in the same state: the same document (and the page's message besides).
    def api(action: str, **body: Any) -> Any:
        answer = _api(client, action, {"queue": "jobs", **body})
        assert answer.status_code == 200, answer.text
        document = answer.json()
        assert document.pop("message")
        return document

    def cli(*argv: str) -> Any:
        return _cli_json(capsys, argv[0], queue_url, *argv[1:], "--queue", "jobs")

    with _queue(queue_url) as q:
        _dead(q, "p1")
    purged = cli("purge", "--dead")
    with _queue(queue_url) as q:
        _dead(q, "p2")
    assert api("purge") == purged and purged["total"] == 1
    with _queue(queue_url) as q:
        _dead(q, "d1")
        _dead(q, "d2")
        q.add_many(["c1", "c2"])
    assert api("redrive", task_id="d2") == cli("redrive", "d1")
    cancelled, twin = api("cancel", task_id="c2"), cli("cancel", "c1")
    assert cancelled.pop("tasks") == {"c2": "CANCELLED"} and twin.pop("tasks") == {
        "c1": "CANCELLED"
    }
    assert cancelled == twin
    assert api("add", task_id="a2", payload={"n": 1}, name="greet") == cli("add", "a1")
    with _queue(queue_url) as q:
        info = q.info("a2")
        assert info is not None and info.payload == {"n": 1} and info.name == "greet"
    paused, resumed = cli("pause"), cli("resume")
    assert api("pause") == paused and api("resume") == resumed


def test_the_api_actions_say_409_when_the_state_changed_underneath(
    queue_url: str, client: TestClient
) -> None:
    with _queue(queue_url) as q:
        q.add("a")
    for action, body in [
        ("redrive", {"task_id": "a"}),  # not DEAD
        ("cancel", {"task_id": "gone"}),
        ("add", {"task_id": "a"}),
        ("resume", {}),  # not paused
    ]:
        answer = _api(client, action, {"queue": "jobs", **body})
        assert answer.status_code == 409, (action, answer.text)
        assert answer.headers["content-type"] == "application/json"
        assert "not" in answer.json()["message"]
    assert _api(client, "redrive", {"queue": "jobs", "task_id": "a"}).json()["skipped"] == 1


def test_the_api_actions_refuse_what_a_page_of_another_site_can_send(
    queue_url: str, client: TestClient
) -> None:
    with _queue(queue_url) as q:
        _dead(q, "d1")
    body = {"queue": "jobs", "task_id": "d1"}
    # A form of another site: urlencoded, multipart or text/plain, never application/json.
    for content_type in ("application/x-www-form-urlencoded", "text/plain", "multipart/form-data"):
        answer = _api(client, "redrive", body, **{"content-type": content_type})
        assert answer.status_code == 415, content_type
        assert "application/json" in answer.json()["error"]
    foreign = _api(client, "redrive", body, origin="https://evil.example")
    assert foreign.status_code == 403 and "another site" in foreign.json()["error"]
    with _queue(queue_url) as q:
        assert q.status("d1") == "DEAD"
    assert _api(client, "redrive", body, origin=HERE).status_code == 200  # its own page's
    with TestClient(create_app(queue_url), base_url=HERE, client=REMOTE) as remote:
        assert _api(remote, "pause", {"queue": "jobs"}).status_code == 403  # no token: local only
    with TestClient(create_app(queue_url, token=TOKEN), base_url=HERE, client=REMOTE) as remote:
        assert _api(remote, "pause", {"queue": "jobs"}).status_code == 401
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert _api(remote, "pause", {"queue": "jobs"}, **bearer).status_code == 200


def test_the_api_actions_refuse_bad_bodies_and_a_read_only_dashboard(
    queue_url: str, client: TestClient
) -> None:
    with _queue(queue_url) as q:
        _dead(q, "d1")
    for body, why in [
        ([1], "must be a JSON object"),
        ({"queue": "jobs", "task_id": 7}, "task_id must be a string"),
        ({"queue": "jobs", "force": True}, "unknown fields ['force']"),
        ({"queue": ""}, "queue name must not be empty"),
    ]:
        answer = _api(client, "redrive", body)
        assert answer.status_code == 400 and why in answer.json()["error"], answer.text
    not_json = client.post(
        "/api/actions/redrive", content="{nope", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]
    assert _api(client, "explode", {"queue": "jobs"}).status_code == 404
    with TestClient(create_app(queue_url, read_only=True), base_url=HERE, client=LOCAL) as c:
        answer = _api(c, "redrive", {"queue": "jobs", "task_id": "d1"})
        assert answer.status_code == 403 and "read-only" in answer.json()["error"]
    with _queue(queue_url) as q:
        assert q.status("d1") == "DEAD"


def test_errors_are_pages_and_under_the_api_json(client: TestClient) -> None:
    for path, status, why in [
        ("/nowhere", 404, "Not Found"),
        ("/tasks?limit=0", 400, "InvalidArgument: limit must be"),
        ("/tasks?state=LOST", 400, "InvalidArgument: no state"),
    ]:
        page = client.get(path)
        assert page.status_code == status and page.headers["content-type"].startswith("text/html")
        assert f"Error {status}" in page.text and why in page.text, page.text
        api = client.get("/api" + path)
        assert api.status_code == status
        assert api.json()["status"] == status and why in api.json()["error"]
    posted = client.post("/actions/explode", data={})
    assert posted.status_code == 404 and "no action &#39;explode&#39;" in posted.text
    assert posted.headers["content-type"].startswith("text/html")


def test_the_csrf_cookie_is_secure_over_https(queue_url: str) -> None:
    _queue(queue_url).close()
    for base, secure in [("https://localhost", True), ("http://localhost", False)]:
        with TestClient(create_app(queue_url), base_url=base, client=LOCAL) as c:
            cookie = c.get("/").headers["set-cookie"]
        assert cookie.startswith("sqlq_csrf=") and ("; secure" in cookie.lower()) == secure


@pytest.mark.processes
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_sqlq_web_answers_once_it_says_where_and_exits_0_when_stopped(
    queue_url: str, stop: signal.Signals
) -> None:
    import browser

    _queue(queue_url).close()
    argv = [sys.executable, "-m", "sqlq", "web", queue_url, "--port", "0"]
    # stdout a pipe, as under systemd or Docker, where Python buffers it (unless told not to)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        url = browser.listening(process)
        with urllib.request.urlopen(url + "/api/queues", timeout=30) as answer:  # at once
            assert answer.status == 200
        # Behind a reverse proxy on this machine, which says the browser came by HTTPS.
        proxied = urllib.request.Request(url + "/", headers={"X-Forwarded-Proto": "https"})
        with urllib.request.urlopen(proxied, timeout=30) as answer:
            assert "secure" in answer.headers["set-cookie"].lower()
        with urllib.request.urlopen(url + "/", timeout=30) as answer:
            assert "secure" not in answer.headers["set-cookie"].lower()
    finally:
        process.send_signal(stop)
        process.wait(30)
    assert process.returncode == 0
