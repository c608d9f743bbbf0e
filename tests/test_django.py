"""sqlq as a backend of Django's Tasks framework (sqlq.django), in a real Django project
(tests/django_project) on SQLite and on PostgreSQL: tasks enqueued from views through
Django's test client, run by workers in processes of their own, results read back
through Django's API.

Django 6.1 needs Python 3.12: where the suite runs on an older Python, the project runs
in a virtual environment of its own, made once per run with the newest Django from
the package index and this sqlq (tests/django_venv.py: built in the background while
the other tests run).  Every Django step is a subprocess of that interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import django_venv
import pytest
from databases import fresh_schema
from needs import need

import sqlq

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tests" / "django_project"
STEP_TIMEOUT = 120  # seconds a Django step or a worker run may take

pytestmark = pytest.mark.processes


@pytest.fixture(scope="session")
def django_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter with Django 6.1+ and this sqlq: the suite's own, or a venv made
    once per run, in the background from the start of the run (tests/django_venv.py)."""
    if django_venv.runs_django(sys.executable):
        return sys.executable
    base = django_venv.new_python()
    need(base, "needs Python 3.12 or newer (Django 6.1)")
    assert base is not None
    python = django_venv.build(django_venv.shared_folder(tmp_path_factory.getbasetemp()), base)
    assert django_venv.runs_django(python)
    return python


class Site:
    """The test project on one database, and the processes that run it."""

    def __init__(self, python: str, database: str, folder: Path) -> None:
        self.python = python
        self.database = database  # a SQLite file or a PostgreSQL URL
        self.log = folder / "tasks.log"
        self.log.touch()
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "mysite.settings",
            "SQLQ_DJANGO_DB": database,
            "SQLQ_DJANGO_LOG": str(self.log),
            "SQLQ_DJANGO_LEASE": "30",
        }
        self.workers: list[subprocess.Popen[bytes]] = []

    def drive(self, *steps: dict[str, Any]) -> list[Any]:
        """Run steps (tests/django_project/drive.py) in one Django process."""
        done = subprocess.run(
            [self.python, "drive.py", json.dumps(steps)],
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
        answers: list[Any] = json.loads(done.stdout)
        return answers

    def enqueue(self, name: str, **body: Any) -> str:
        (task_id,) = self.enqueue_all((name, body))
        return task_id

    def enqueue_all(self, *calls: tuple[str, dict[str, Any]]) -> list[str]:
        """Each (task name, request body) enqueued through its view, in one process
        (a Django process costs about a second of CPU to start)."""
        answers = self.drive(*({"path": f"/enqueue/{name}/", "body": body} for name, body in calls))
        assert [answer["status"] for answer in answers] == ["READY"] * len(calls)
        return [str(answer["id"]) for answer in answers]

    def result(self, name: str, result_id: str) -> dict[str, Any]:
        (answer,) = self.results((name, result_id))
        return answer

    def results(self, *asked: tuple[str, str]) -> list[dict[str, Any]]:
        """The results of (task name, result id) through their view, in one process."""
        answers = self.drive(*({"path": f"/result/{name}/{id_}/"} for name, id_ in asked))
        return [dict(answer) for answer in answers]

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        """`manage.py sqlq_worker ARGS` in a process of its own."""
        process = subprocess.Popen(
            [self.python, "manage.py", "sqlq_worker", *args],
            cwd=PROJECT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.workers.append(process)
        return process

    def run_worker(self, *args: str) -> None:
        process = self.worker(*args)
        _, stderr = process.communicate(timeout=STEP_TIMEOUT)
        assert process.returncode == 0, stderr.decode()

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def queue(self, name: str = "default") -> sqlq.Queue:
        return sqlq.Queue(self.database, lease_seconds=30, max_attempts=3, queue=name)

    def stop(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.kill()
            process.wait()


@pytest.fixture(params=["sqlite", "postgresql"])
def site(request: pytest.FixtureRequest, tmp_path: Path, django_python: str) -> Iterator[Site]:
    """The project on a new database of its own (the queue in the same database)."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            database = str(tmp_path / "site.db")
        else:
            database = stack.enter_context(fresh_schema(request.getfixturevalue("postgres_url")))
        project = Site(django_python, database, tmp_path)
        stack.callback(project.stop)
        yield project


def _wait_for(path: Path, process: subprocess.Popen[bytes]) -> None:
    """Until ``path`` exists (the task says it started); fails if the worker exits."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while not path.exists():
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_tasks_from_views_run_by_a_worker_with_results_through_django(site: Site) -> None:
    added, awaited, failed, mail = site.enqueue_all(
        ("add", {"args": [2, 3]}),
        ("add_later", {"kwargs": {"a": 4, "b": 5}}),
        ("boom", {"args": ["bad input"]}),
        ("send", {"args": ["ann@example.com"]}),  # queue_name="emails"
    )
    assert site.result("add", added)["status"] == "READY"

    with site.queue() as queue:  # Django's result id is the sqlq task's id
        info = queue.info(added)
        assert info is not None and info.name == "shop.tasks.add"
        assert info.payload == {"args": [2, 3], "kwargs": {}}
    site.run_worker("--burst")

    done, later, bad, sent = site.results(
        ("add", added), ("add_later", awaited), ("boom", failed), ("send", mail)
    )
    assert (done["status"], done["return_value"], done["errors"]) == ("SUCCESSFUL", 5, [])
    assert done["finished_at"] >= done["enqueued_at"]
    assert later["return_value"] == 9
    assert bad["status"] == "FAILED" and "return_value" not in bad
    (error,) = bad["errors"]
    assert error["class"] == "builtins.ValueError"
    assert error["traceback"].startswith("Traceback (most recent call last):")
    assert error["traceback"].rstrip().endswith("ValueError: bad input")

    # The emails queue is a sqlq queue of its own: this worker did not take its task;
    # `sqlq worker --django-settings` does.
    assert sent["status"] == "READY"
    worker = subprocess.run(
        [site.python, "-m", "sqlq", "worker", "--django-settings", "mysite.settings",
         "--queue", "emails", "--burst"],
        cwd=PROJECT, env=site.env, capture_output=True, text=True, timeout=STEP_TIMEOUT,
    )  # fmt: skip
    assert worker.returncode == 0, worker.stderr
    assert site.result("send", mail)["return_value"] == "ann@example.com"
    assert site.lines() == ["send ann@example.com"]


def test_the_worker_closes_a_tasks_database_connection_as_after_a_request(site: Site) -> None:
    """close_old_connections around each task: with CONN_MAX_AGE 0 every task of one
    worker thread opens a connection of its own, as every request would."""
    first, second = site.enqueue_all(("connections_made", {}), ("connections_made", {}))
    site.run_worker("--burst")  # one thread runs both, one after the other
    made = [
        r["return_value"] for r in site.results(*(("connections_made", i) for i in (first, second)))
    ]
    assert made[1] == made[0] + 1, made


def test_an_enqueue_in_a_rolled_back_atomic_block_never_runs(site: Site) -> None:
    (ids,) = site.drive({"path": "/enqueue-rolled-back/", "body": {}})
    with site.queue() as queue:
        assert queue.info(ids["rolled_back"]) is None
        assert queue.status(ids["committed"]) == "AVAILABLE"
    site.run_worker("--burst", "--queue", "default")
    assert [line.split()[0] for line in site.lines()] == ["committed"]
    (missing,) = site.drive(
        {
            "code": "from django.tasks.exceptions import TaskResultDoesNotExist\n"
            "from shop.tasks import record\n"
            "try:\n"
            f"    record.get_result({ids['rolled_back']!r})\n"
            "except TaskResultDoesNotExist:\n"
            "    answer = 'does not exist'\n"
        }
    )
    assert missing == "does not exist"


def test_priorities_and_run_after_are_honoured(site: Site) -> None:
    sent = site.drive(  # in one process: quicker than the delay
        {"path": "/enqueue/record/", "body": {"args": ["later"], "delay": 5, "priority": -100}},
        {"path": "/enqueue/record/", "body": {"args": ["low"], "priority": -5}},
        {"path": "/enqueue/record/", "body": {"args": ["normal"]}},
        {"path": "/enqueue/record/", "body": {"args": ["high"], "priority": 50}},
        {"path": "/enqueue/record/", "body": {"args": ["parked"], "delay": 3600}},
    )
    later, low, _, high, parked = (answer["id"] for answer in sent)
    with site.queue() as queue:
        waiting = queue.info(later)
        assert waiting is not None and waiting.state == "WAITING" and waiting.run_at is not None
        run_at = waiting.run_at
    got_high, got_low, got_parked = site.results(
        ("record", high), ("record", low), ("record", parked)
    )
    assert got_high["priority"] == 50
    assert got_low["priority"] == -5
    # Waiting for its run_after reads as READY; an hour's delay stays waiting however loaded the
    # machine (5 s may have passed by now), and is cancelled so that the drain need not wait.
    assert got_parked["status"] == "READY"
    with site.queue() as queue:
        queue.cancel(parked)

    site.run_worker("--drain")  # one task at a time, until the waiting one has run
    ran = [line.split() for line in site.lines()]
    assert [label for label, _ in ran] == ["high", "normal", "low", "later"]
    assert float(ran[-1][1]) >= run_at


def test_a_worker_killed_mid_task_loses_nothing(site: Site, tmp_path: Path) -> None:
    site.env["SQLQ_DJANGO_LEASE"] = "2"  # the killed worker's lease runs out soon
    marker = tmp_path / "started"
    task_id = site.enqueue("stubborn", args=[str(marker)])
    first = site.worker()
    _wait_for(marker, first)
    assert marker.read_text() == task_id  # the context's result id
    running = site.result("stubborn", task_id)
    assert (running["status"], running["attempts"]) == ("RUNNING", 1)

    first.send_signal(signal.SIGKILL)
    first.wait(timeout=STEP_TIMEOUT)
    second = site.worker()  # takes the task once the dead worker's lease runs out
    with site.queue() as queue:
        deadline = time.monotonic() + STEP_TIMEOUT
        while queue.status(task_id) != "COMPLETED":
            assert second.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    done = site.result("stubborn", task_id)
    assert done["status"] == "SUCCESSFUL"
    assert done["return_value"] == {"attempt": 2, "id": task_id}

    second.send_signal(signal.SIGTERM)  # a graceful stop: exit 0, its registry row gone
    assert second.wait(timeout=STEP_TIMEOUT) == 0
    with site.queue() as queue:  # (the killed worker's row stays, as stale)
        assert [w.pid for w in queue.workers()] == [first.pid]


def test_what_django_documents_and_what_sqlq_cannot_run(site: Site) -> None:
    answers = site.drive(
        {  # arguments that JSON cannot hold raise at enqueue, and nothing is stored
            "code": "from shop.tasks import add\n"
            "try:\n"
            "    add.enqueue(object(), 1)\n"
            "except TypeError as exc:\n"
            "    answer = type(exc).__name__\n"
        },
        {  # a priority outside Django's range is refused when the task is defined
            "code": "from django.tasks.exceptions import InvalidTask\n"
            "from shop.tasks import add\n"
            "try:\n"
            "    add.using(priority=101)\n"
            "except InvalidTask as exc:\n"
            "    answer = str(exc)\n"
        },
        {  # a task of __main__ could never be imported by a worker
            "code": "from django.tasks import task\n"
            "from django.tasks.exceptions import InvalidTask\n"
            "import shop.tasks\n"
            "def orphan():\n"
            "    pass\n"
            "orphan.__module__ = '__main__'\n"
            "orphan.__qualname__ = 'orphan'\n"
            "import sys; sys.modules['__main__'].orphan = orphan\n"
            "try:\n"
            "    task(orphan)\n"
            "except InvalidTask as exc:\n"
            "    answer = str(exc)\n"
        },
    )
    assert answers[0] == "TypeError"
    assert "between -100 and 100" in answers[1]
    assert "__main__" in answers[2]
    with site.queue() as queue:
        assert sum(queue.stats().counts.values()) == 0

    (result_id,) = site.drive(  # aenqueue and aget_result, from an event loop
        {
            "code": "import asyncio\n"
            "from shop.tasks import add\n"
            "async def main():\n"
            "    sent = await add.aenqueue(20, 22)\n"
            "    return sent.id, (await add.aget_result(sent.id)).status\n"
            "result_id, status = asyncio.run(main())\n"
            "assert status == 'READY', status\n"
            "answer = result_id\n"
        }
    )
    site.run_worker("--burst")
    # that result, and a new task (to cancel) in the same process
    ran, enqueued = site.drive(
        {"path": f"/result/add/{result_id}/"}, {"path": "/enqueue/add/", "body": {"args": [1, 1]}}
    )
    assert ran["return_value"] == 42
    assert enqueued["status"] == "READY"
    cancelled = str(enqueued["id"])
    with site.queue() as queue:
        assert queue.cancel(cancelled) == sqlq.Cancel.CANCELLED
    gone = site.result("add", cancelled)
    assert gone["status"] == "FAILED"
    assert gone["errors"][0]["class"] == "sqlq.django.WorkerError"


def test_a_queue_in_a_file_of_its_own_and_the_sqlite_library_check(
    django_python: str, tmp_path: Path
) -> None:
    """OPTIONS URL: the queue in its own SQLite file, Django on the standard sqlite3
    (no enqueue in Django's transaction then); DATABASE of a SQLite database whose
    Django connections use another SQLite library than sqlq's is refused."""
    site = Site(django_python, str(tmp_path / "site.db"), tmp_path)
    site.env["SQLQ_DJANGO_QUEUE"] = str(tmp_path / "tasks.db")
    try:
        (library,) = site.drive(
            {"code": "from django.db.backends.sqlite3.base import Database\n"
                     "answer = Database.__name__"}
        )  # fmt: skip
        assert library == "sqlite3.dbapi2"
        task_id = site.enqueue("add", args=[1, 2])
        site.run_worker("--burst")
        assert site.result("add", task_id)["return_value"] == 3
        with sqlq.Queue(str(tmp_path / "tasks.db"), lease_seconds=30, max_attempts=3) as queue:
            assert queue.status(task_id) == "COMPLETED"

        site.env["SQLQ_DJANGO_QUEUE"] = "default"
        site.env["SQLQ_DJANGO_STANDARD_SQLITE"] = "1"  # settings.py: no pysqlite3 for Django
        (refused,) = site.drive(
            {"code": "from django.core.exceptions import ImproperlyConfigured\n"
                     "from shop.tasks import add\n"
                     "try:\n"
                     "    add.enqueue(1, 2)\n"
                     "except ImproperlyConfigured as exc:\n"
                     "    answer = str(exc)\n"}
        )  # fmt: skip
        assert "two SQLite libraries" in refused
    finally:
        site.stop()


def test_the_worker_command_takes_a_database_and_handler_or_django_settings() -> None:
    from sqlq import cli

    assert cli.main(["worker"]) == 2
    assert cli.main(["worker", "jobs.db", "--django-settings", "mysite.settings"]) == 2
    # What the Django worker does not do is refused, not left out without a word.
    for option in (["--tracing"], ["--lease", "5"], ["--metrics-port", "0"], ["--fair"]):
        assert cli.main(["worker", "--django-settings", "mysite.settings", *option]) == 2
