"""The web dashboard (sqlq.web) probed as an attacker and a new user would: query
parameters no form sends, requests another site makes, tokens that guard nothing.
Each test here failed on the dashboard as first merged (issue 14), but those that say
"Held up": they guard what resisted the probing."""

from __future__ import annotations

import base64
import signal
from collections.abc import Iterator
from pathlib import Path

import postgres
import pytest
from starlette.testclient import TestClient

import sqlq
from sqlq.browse import Browse, Found
from sqlq.errors import InvalidConfig
from sqlq.sqlite.backend import SqliteBackend
from sqlq.web import create_app, metrics_app
from sqlq.web.app import MAX_BODY

LOCAL = ("127.0.0.1", 50000)
REMOTE = ("192.0.2.7", 50000)


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite database with no task (what these tests probe is the web app's own)."""
    path = str(tmp_path / "jobs.db")
    sqlq.Queue(path, lease_seconds=30, max_attempts=1).close()
    return path


@pytest.fixture
def client(db: str) -> Iterator[TestClient]:
    with TestClient(create_app(db), base_url="http://127.0.0.1:8470", client=LOCAL) as c:
        yield c


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "²"},  # str.isdigit() says yes, int() says no
        {"limit": "\u0661\u0660"},  # int() reads Arabic-Indic digits: still not what a form sends
        {"after": "².1"},
        {"after": "1.\u0661"},
    ],
)
def test_digits_other_than_ascii_are_refused_with_the_reason(
    client: TestClient, params: dict[str, str]
) -> None:
    for path in ("/tasks", "/api/tasks"):
        answer = client.get(path, params=params)
        assert answer.status_code == 400, (path, params, answer.status_code)
        assert "InvalidArgument" in answer.text


@pytest.mark.parametrize("token", ["", "short"])
def test_a_token_that_guards_nothing_is_refused_when_the_app_is_made(db: str, token: str) -> None:
    # The README's mount: create_app(db, token=os.environ[...]) with the variable set empty
    # let anyone in with "Authorization: Bearer " (compare_digest("", "") is True).
    for make in (create_app, metrics_app):
        with pytest.raises(InvalidConfig, match="at least 16 characters"):
            make(db, token=token)


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8470", "localhost.evil.example", "192.0.2.7:8470"]
)
def test_without_a_token_a_name_rebound_to_this_machine_is_refused(db: str, host: str) -> None:
    # DNS rebinding: evil.example first resolves to the attacker's server, whose page then
    # asks evil.example again, now resolving to 127.0.0.1. The browser sends the request
    # from this machine with Host: evil.example, and lets the page read the answer (same
    # origin for it): every payload, and the CSRF token of the actions' forms.
    with TestClient(create_app(db), base_url="http://127.0.0.1:8470", client=LOCAL) as c:
        for path in ("/api/tasks", "/"):
            answer = c.get(path, headers={"host": host})
            assert answer.status_code == 403, (path, host)
            assert "this machine only" in answer.text


@pytest.mark.parametrize(
    "base",
    ["http://127.0.0.1:8470", "http://localhost:8470", "http://[::1]:8470", "http://127.0.0.2"],
)
def test_without_a_token_loopback_names_are_served(db: str, base: str) -> None:
    with TestClient(create_app(db), base_url=base, client=LOCAL) as c:
        assert c.get("/api/queues").status_code == 200, base


def test_a_task_name_filter_no_task_could_have_is_refused_on_every_backend(
    queue_url: str,
) -> None:
    # PostgreSQL's text takes no NUL: the filter reached the server and came back as a
    # StorageError (503, "the database is unwell") for what is a bad request.
    sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1).close()
    with TestClient(create_app(queue_url), base_url="http://127.0.0.1", client=LOCAL) as c:
        for path in ("/tasks", "/api/tasks"):
            answer = c.get(path, params={"name": "a\x00b"})
            assert answer.status_code == 400, (path, answer.text)
            assert "task name must not contain NUL" in answer.text


def test_a_workers_handler_histogram_keeps_a_bounded_number_of_task_names() -> None:
    from sqlq.worker.metrics import WorkerMetrics

    metrics = WorkerMetrics("jobs", 0)

    def names() -> int:
        return len(
            {
                sample.labels["name"]
                for family in metrics.registry.collect()
                for sample in family.samples
                if "name" in sample.labels
            }
        )

    for i in range(1000):
        metrics.handled(f"send-to-user-{i}", "completed", 0.01)
    some = names()
    for i in range(1000, 3000):
        metrics.handled(f"send-to-user-{i}", "completed", 0.01)
    assert names() == some  # no series more for names past the bound
    metrics.handled("send-to-user-0", "failed", 0.01)  # a name seen first keeps its own
    failed = {
        s.labels["name"]
        for family in metrics.registry.collect()
        for s in family.samples
        if s.labels.get("outcome") == "failed"
    }
    assert failed == {"send-to-user-0"}


@pytest.mark.parametrize("order", ["newest", "line"])
def test_keyset_pages_skip_and_repeat_nothing_while_tasks_come_and_go(
    queue_url: str, order: str
) -> None:
    # (Held up: a guard.) Two queues interleaved; between two pages tasks are added and
    # purged, including the last one shown: every task there throughout is shown once.
    queues = [sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1, queue=name) for name in "ab"]
    try:
        for i in range(12):
            for q in queues:
                q.add(f"{q.queue}{i:02d}")
        for _ in range(4):  # some finish, the others wait: the line mixes states
            lease = queues[0].claim()
            assert lease is not None
            queues[0].fail(lease.task_id, token=lease.token, error="no")
        with TestClient(create_app(queue_url), base_url="http://127.0.0.1", client=LOCAL) as c:
            seen: list[str] = []
            after: str | None = None
            for page in range(100):
                params = {"order": order, "limit": "5", **({"after": after} if after else {})}
                answer = c.get("/api/tasks", params=params).json()
                seen += [t["task_id"] for t in answer["tasks"]]
                after = answer["next"]
                if after is None:
                    break
                queues[1].add(f"new{page:02d}")  # newer than every page: newest never shows it
                queues[0].purge(states=("DEAD",))  # a00..a03: shown on the first page, or not
        assert len(seen) == len(set(seen)), seen
        kept = {f"{q}{i:02d}" for q in "ab" for i in range(12)} - {f"a{i:02d}" for i in range(4)}
        assert kept <= set(seen), sorted(kept - set(seen))
    finally:
        for q in queues:
            q.close()


def _dead_task(db: str) -> None:
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="jobs") as q:
        q.add("d1")
        lease = q.claim()
        assert lease is not None
        q.fail("d1", token=lease.token, error="no")


def test_forged_actions_change_nothing(db: str, client: TestClient) -> None:
    # (Held up: a guard.) A page's own CSRF token, but from a sandboxed frame or a
    # data: URL (Origin: null), or another scheme or port of this host; a GET; a form
    # whose token and cookie are both empty.
    _dead_task(db)
    page = client.get("/dead?queue=jobs").text
    token = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    form = {"queue": "jobs", "task_id": "d1", "csrf": token}
    for origin in (
        "null",
        "https://127.0.0.1:8470",
        "http://127.0.0.1:8471",
        "http://localhost:8470",
    ):
        answer = client.post("/actions/redrive", data=form, headers={"origin": origin})
        assert answer.status_code == 403 and "another site" in answer.text, origin
    assert client.get("/actions/redrive", params=form).status_code == 405
    client.cookies.set("sqlq_csrf", "")
    answer = client.post("/actions/redrive", data={**form, "csrf": ""})
    assert answer.status_code == 403 and "CSRF" in answer.text
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="jobs") as q:
        assert q.status("d1") == "DEAD"


def test_the_task_list_page_reads_no_payload(db: str, client: TestClient) -> None:
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="jobs") as q:
        q.add_many([(f"t{i}", {"big": "x" * 1000}) for i in range(3)])
    read: list[object] = []
    original = SqliteBackend.browse

    def browse(self: SqliteBackend, where: Browse) -> list[Found]:
        found = original(self, where)
        read.extend(f.task.payload for f in found)
        return list(found)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SqliteBackend, "browse", browse)
        page = client.get("/tasks")
    assert page.status_code == 200 and "t2" in page.text
    # It read them all (50 tasks of 4 MiB payloads: 2.2 s and 450 MB for a 32 KB page).
    assert len(read) == 3 and all(payload is None for payload in read)
    listed = client.get("/api/tasks").json()["tasks"]  # the API's list: as sqlq list --json
    assert [t["payload"] for t in listed] == [{"big": "x" * 1000}] * 3


def test_a_postgresql_server_that_goes_away_is_a_clear_503_and_the_dashboard_recovers() -> None:
    # (Held up: a guard.) The server killed under a running dashboard (SIGQUIT: every
    # session ends at once), then started again on the same data.
    with postgres.restartable() as cluster:
        with sqlq.Queue(cluster.url, lease_seconds=30, max_attempts=1, queue="jobs") as q:
            q.add("a")
        app = create_app(cluster.url)
        with TestClient(app, base_url="http://127.0.0.1", client=LOCAL) as c:
            paths = ("/", "/tasks", "/task?queue=jobs&id=a", "/api/tasks", "/metrics")
            assert all(c.get(path).status_code == 200 for path in paths)
            assert cluster.postmaster is not None
            cluster.postmaster.send_signal(signal.SIGQUIT)
            cluster.postmaster.wait()
            for path in paths:
                answer = c.get(path)
                assert answer.status_code == 503, path
                assert "Unavailable: " in answer.text and "could not connect" in answer.text
            cluster.start()
            assert all(c.get(path).status_code == 200 for path in paths)


def test_a_token_beyond_ascii_is_accepted_as_sent(db: str) -> None:
    # Starlette reads header bytes as latin-1: a UTF-8 token in a Bearer header never
    # matched the token's own text, while the same token by basic auth (base64 of UTF-8) did.
    token = "jeton-très-secret-0123"
    with TestClient(create_app(db, token=token), base_url="http://h", client=REMOTE) as c:
        bearer = c.get("/api/queues", headers={"authorization": b"Bearer " + token.encode()})
        assert bearer.status_code == 200
        basic = base64.b64encode(f"me:{token}".encode())
        assert c.get("/api/queues", headers={"authorization": b"Basic " + basic}).status_code == 200
        wrong = c.get("/api/queues", headers={"authorization": b"Bearer " + token.encode()[:-1]})
        assert wrong.status_code == 401


def test_adding_a_payload_nested_too_deep_is_a_400_with_the_reason(client: TestClient) -> None:
    # json.loads raised RecursionError (a 500) on 100,000 nested brackets; a payload
    # nested past sqlq's limit, but not that far, is refused by the queue's own check.
    token = client.get("/").text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    for depth in (100_000, 300):
        answer = client.post(
            "/actions/add",
            data={
                "csrf": token,
                "queue": "jobs",
                "task_id": "deep",
                "payload": "[" * depth + "]" * depth,
            },
        )
        assert answer.status_code == 400, (depth, answer.text)
        assert "InvalidPayload: JSON nested more than 200 deep" in answer.text


# --- probe 14: the JSON API's actions ----------------------------------------------

JSON = {"content-type": "application/json"}


def test_an_api_action_whose_body_nests_too_deep_is_a_400(client: TestClient) -> None:
    # json.loads raised RecursionError (a 500) on the body itself: 100,000 brackets, or a
    # payload 1,000 deep inside an otherwise good body.
    deep = "[" * 1000 + "]" * 1000
    for body in ("[" * 100_000, f'{{"queue": "jobs", "task_id": "t", "payload": {deep}}}'):
        answer = client.post("/api/actions/add", content=body, headers=JSON)
        assert answer.status_code == 400, answer.text
        assert "JSON nested more than 200 deep" in answer.json()["error"]
    payload = "[" * 199 + "]" * 199  # as deep as a payload may be: added
    good = f'{{"queue": "jobs", "task_id": "t", "payload": {payload}}}'
    assert client.post("/api/actions/add", content=good, headers=JSON).status_code == 200


def test_an_empty_task_id_redrives_no_task_rather_than_all(db: str, client: TestClient) -> None:
    # "task_id": "" (a script's empty variable) sent every dead task of the queue back to
    # the line, as a body without task_id does; cancel refused the same body.
    _dead_task(db)
    answer = client.post("/api/actions/redrive", json={"queue": "jobs", "task_id": ""})
    assert answer.status_code == 400 and "task id must not be empty" in answer.json()["error"]
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue="jobs") as q:
        assert q.status("d1") == "DEAD"


def test_an_action_body_past_the_limit_is_refused_as_it_arrives(client: TestClient) -> None:
    # Both routes read the whole body first (a page's form before its CSRF token is
    # checked): any site's page could make a dashboard on this machine hold gigabytes.
    text = '"' + "x" * MAX_BODY + '"'
    for path, headers in (("/actions/add", {}), ("/api/actions/add", JSON)):
        answer = client.post(path, content=f'{{"payload": {text}}}', headers=headers)
        assert answer.status_code == 413, (path, answer.status_code)
        assert f"at most {MAX_BODY} bytes" in answer.text
