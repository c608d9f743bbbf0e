"""Tasks by name (issue 11): the registry, defer/enqueue, a worker routing each task
to its function, and the check at worker start of what a handler can take."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import sqlq
from sqlq.errors import InvalidConfig, InvalidTask, NotRetryable
from sqlq.worker import Worker, resolve_target

# --- the registry ------------------------------------------------------------------------


def test_a_bare_decorator_names_the_task_module_dot_qualname() -> None:
    tasks = sqlq.Tasks()

    @tasks.task
    def ping() -> str:
        return "pong"

    assert (
        ping.name
        == f"{__name__}.test_a_bare_decorator_names_the_task_module_dot_qualname.<locals>.ping"
    )
    assert list(tasks) == [ping.name] and tasks[ping.name] is ping and ping.name in tasks
    assert (ping.max_attempts, ping.retry) == (None, None)
    assert ping() == "pong"  # still the plain function


def test_a_named_task_keeps_its_options_and_stays_a_function() -> None:
    tasks = sqlq.Tasks()
    policy = sqlq.Retry.exponential(1, 60)

    @tasks.task(name="resize", max_attempts=3, retry=policy)
    def resize(path: str, width: int) -> tuple[str, int]:
        return path, width

    assert (resize.name, resize.max_attempts, resize.retry) == ("resize", 3, policy)
    assert resize(path="a.png", width=640) == ("a.png", 640)
    assert resize("b.png", 1) == ("b.png", 1)
    assert len(tasks) == 1


def _positional_only(a: int, /) -> None: ...


def _star_args_only(*args: int) -> None: ...


def _noop() -> None: ...


@pytest.mark.parametrize(
    ("fn", "options", "said"),
    [
        (_noop, {"name": ""}, "task name must not be empty"),
        (_noop, {"name": 7}, "task name must be a str"),
        (_noop, {"name": "x" * 1025}, "the limit is 1024"),
        (_noop, {"name": "a\x00"}, "must not contain NUL"),
        (_noop, {"max_attempts": 0}, "max_attempts must be between 1"),
        (_noop, {"retry": 5}, "retry must be a sqlq.Retry"),
        (_positional_only, {}, "parameters a are positional-only"),
        (_star_args_only, {}, "takes only *args"),
        ("not a function", {}, "a task is a function, not str"),
    ],
)
def test_what_cannot_be_a_task_is_refused(fn: Any, options: dict[str, Any], said: str) -> None:
    tasks = sqlq.Tasks()
    with pytest.raises(InvalidConfig, match=said.replace("*", r"\*")):
        tasks.task(**options)(fn)
    assert len(tasks) == 0


def test_functions_that_take_keywords_are_accepted() -> None:
    tasks = sqlq.Tasks()

    def defaulted(a: int = 1, /, b: int = 2) -> None: ...

    def star(*args: int, key: int) -> None: ...

    def anything(**kwargs: Any) -> None: ...

    for i, fn in enumerate([_noop, defaulted, star, anything]):
        tasks.task(name=f"t{i}")(fn)
    assert len(tasks) == 4


def test_a_name_is_registered_once() -> None:
    tasks = sqlq.Tasks()
    tasks.task(name="x")(_noop)
    with pytest.raises(InvalidConfig, match="a task named 'x' is registered already"):
        tasks.task(name="x")(lambda: None)
    tasks.task(_noop)
    with pytest.raises(InvalidConfig, match="registered already"):
        tasks.task(_noop)  # the same default name
    assert list(tasks) == ["x", f"{__name__}._noop"]


# --- defer and enqueue -------------------------------------------------------------------


@pytest.fixture
def resize() -> sqlq.Task[..., None]:
    tasks = sqlq.Tasks()

    @tasks.task(name="resize", max_attempts=2, retry=sqlq.Retry.fixed(7))
    def resize(path: str, width: int = 100) -> None: ...

    return resize


def test_defer_stores_the_arguments_the_name_and_the_options(
    resize: sqlq.Task[..., None], make_queue: Any
) -> None:
    q = make_queue(30, 5)
    task_id = resize.enqueue(q, {"path": "a.png", "width": 640}, now=1)
    assert isinstance(task_id, str) and len(task_id) == 32 and int(task_id, 16) >= 0
    info = q.info(task_id, 1)
    assert (info.name, info.payload, info.max_attempts) == (
        "resize",
        {"path": "a.png", "width": 640},
        2,
    )
    lease = q.claim(2)
    assert (lease.task_id, lease.name, lease.payload) == (task_id, "resize", info.payload)
    assert q.fail(task_id, 3, token=lease.token) == "WAITING"  # the task's own retry
    assert q.info(task_id, 3).run_at == 10


def test_defer_on_a_durable_queue(resize: sqlq.Task[..., None], queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        first, second = resize.defer(q, path="a.png"), resize.defer(q, path="b.png", width=1)
        assert first != second
        assert [(t.task_id, t.name, t.payload) for t in q.tasks()] == [
            (first, "resize", {"path": "a.png"}),
            (second, "resize", {"path": "b.png", "width": 1}),
        ]


def test_enqueue_with_an_id_that_exists_stores_nothing(
    resize: sqlq.Task[..., None], make_queue: Any
) -> None:
    q = make_queue(30, 5)
    assert resize.enqueue(q, {"path": "a"}, task_id="resize-a", now=0) == "resize-a"
    assert resize.enqueue(q, {"path": "other"}, task_id="resize-a", now=0) is None
    assert resize.enqueue(q, {"path": "b"}, task_id="later", delay=5, now=0) == "later"
    assert q.info("resize-a", 0).payload == {"path": "a"}
    assert q.status("later", 0) == "WAITING"


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({}, "missing a required argument: 'path'"),
        ({"path": "a", "height": 3}, "unexpected keyword argument 'height'"),
        ({"path": b"bytes"}, "the arguments cannot be stored"),
        ({"path": object()}, "the arguments cannot be stored"),
        (["path"], "takes its arguments as a mapping"),
    ],
)
def test_a_bad_call_is_refused_before_anything_is_stored(
    resize: sqlq.Task[..., None], make_queue: Any, kwargs: Any, said: str
) -> None:
    q = make_queue(30, 5)
    with pytest.raises(InvalidTask, match=said):
        resize.enqueue(q, kwargs, now=0)
    if isinstance(kwargs, dict) and not isinstance(q, sqlq.WorkQueue):  # which needs now=
        with pytest.raises(InvalidTask, match=said):
            resize.defer(q, **kwargs)
    assert q.tasks(0) == []


def test_invalid_task_is_a_value_and_a_type_error() -> None:
    assert issubclass(InvalidTask, ValueError) and issubclass(InvalidTask, TypeError)


def test_enqueue_in_the_callers_transaction(resize: sqlq.Task[..., None], queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        with q.engine.begin() as conn:
            resize.enqueue(q, {"path": "kept"}, task_id="kept", conn=conn)
        try:
            with q.engine.begin() as conn:
                resize.enqueue(q, {"path": "undone"}, task_id="undone", conn=conn)
                raise RuntimeError("the caller's transaction fails")
        except RuntimeError:
            pass
        assert [t.task_id for t in q.tasks()] == ["kept"]


# --- defer_many: a batch of calls in one transaction (issue 23) ---------------------------


def test_defer_many_adds_a_task_per_call_in_order(
    resize: sqlq.Task[..., None], make_queue: Any
) -> None:
    q = make_queue(30, 5)
    calls = [{"path": f"{n}.png", "width": n} for n in range(5)] + [{"path": "last.png"}]
    ids = resize.defer_many(q, calls, now=1)
    assert len(ids) == len(set(ids)) == 6
    assert all(uuid.UUID(i).hex == i and uuid.UUID(i).version == 4 for i in ids)  # as defer's
    assert all(uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)
    found = q.tasks(1)
    assert [(t.task_id, t.name, t.payload, t.max_attempts) for t in found] == [
        (i, "resize", call, 2) for i, call in zip(ids, calls, strict=True)
    ]
    lease = q.claim(2)
    assert (lease.task_id, lease.name) == (ids[0], "resize")
    assert q.fail(ids[0], 3, token=lease.token) == "WAITING"  # the task's own retry
    assert q.info(ids[0], 3).run_at == 10
    assert resize.defer_many(q, iter([]), now=3) == []  # any iterable; none: nothing added


def test_defer_many_takes_the_options_of_enqueue_for_every_task(make_queue: Any) -> None:
    tasks = sqlq.Tasks()

    @tasks.task(name="ranked", priority=3)
    def ranked(n: int) -> None: ...

    q = make_queue(30, 5)
    mine = ranked.defer_many(q, [{"n": 1}, {"n": 2}], now=0)
    urgent = ranked.defer_many(q, [{"n": 3}], now=0, priority=9, group="tenant-a")
    later = ranked.defer_many(q, [{"n": 4}], now=0, delay=60)
    assert [q.info(i, 0).priority for i in (*mine, *urgent)] == [3, 3, 9]
    assert q.info(urgent[0], 0).group == "tenant-a"
    assert q.status(later[0], 0) == "WAITING" and q.info(later[0], 0).run_at == 60
    assert [q.claim(1).task_id for _ in range(3)] == [*urgent, *mine]


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ({}, "call 2 of the batch, cannot take these arguments: missing a required argument"),
        ({"path": "a", "height": 3}, "call 2 of the batch, cannot take these arguments: .*height"),
        ({"path": object()}, "call 2 of the batch: the arguments cannot be stored"),
        ({"path": "x" * 2048}, "call 2 of the batch: the arguments cannot be stored"),
        (["path"], "call 2 of the batch, takes its arguments as a mapping"),
    ],
)
def test_defer_many_stores_nothing_if_a_call_is_bad_and_names_it(
    resize: sqlq.Task[..., None], make_queue: Any, bad: Any, said: str
) -> None:
    q = make_queue(30, 5, max_payload_bytes=1024)
    resize.defer_many(q, [{"path": "before"}], now=0)
    calls = [{"path": "a"}, {"path": "b"}, bad, {"path": "d"}, {}]  # (the last is bad too)
    with pytest.raises(InvalidTask, match=said) as refused:
        resize.defer_many(q, calls, now=0)
    assert refused.value.index == 2
    assert [t.payload for t in q.tasks(0)] == [{"path": "before"}]


def _posonly(a: int = 1, /, b: int = 2, **more: Any) -> None: ...


def _closed(a: int, b: int = 2, *, c: int, d: int = 4) -> None: ...


def _star(*args: Any, c: int = 3, **more: Any) -> None: ...


@pytest.mark.parametrize("fn", [_posonly, _closed, _star])
@pytest.mark.parametrize(
    "names",
    [
        (),
        ("a",),
        ("b",),
        ("c",),
        ("a", "c"),
        ("a", "b", "c", "d"),
        ("a", "c", "e"),
        ("e",),
        ("args",),
        ("more",),
        (1,),
        ("c", 1),
    ],
)
def test_a_call_is_taken_exactly_when_the_signature_binds_it(fn: Any, names: tuple[Any]) -> None:
    """The check of a call's arguments (a quick one of their names first) accepts
    exactly what the function's signature binds by keyword, and refuses in its words."""
    task = sqlq.Task(fn, "f")
    kwargs = dict.fromkeys(names, 0)
    try:
        task.signature.bind(**kwargs)
    except TypeError as exc:
        with pytest.raises(InvalidTask) as refused:
            task.arguments(kwargs)
        assert str(refused.value) == f"task 'f' cannot take these arguments: {exc}"
    else:
        assert task.arguments(kwargs) == kwargs


def test_defer_many_takes_calls_not_one_mapping(
    resize: sqlq.Task[..., None], make_queue: Any
) -> None:
    q = make_queue(30, 5)
    with pytest.raises(InvalidTask, match="an iterable of calls"):
        resize.defer_many(q, {"path": "a"}, now=0)
    assert q.tasks(0) == []
    assert InvalidTask("one call").index is None  # only a batch's refusal has an index


def test_defer_many_in_the_callers_transaction(
    resize: sqlq.Task[..., None], queue_url: str
) -> None:
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        with q.engine.begin() as conn:
            kept = resize.defer_many(q, [{"path": "kept"}], conn=conn)
        try:
            with q.engine.begin() as conn:
                resize.defer_many(q, [{"path": "undone"}, {"path": "too"}], conn=conn)
                raise RuntimeError("the caller's transaction fails")
        except RuntimeError:
            pass
        assert [t.task_id for t in q.tasks()] == kept


def test_defer_many_async(resize: sqlq.Task[..., None], queue_url: str) -> None:
    async def main() -> list[str]:
        async with sqlq.AsyncQueue(queue_url, lease_seconds=30, max_attempts=5) as aq:
            with pytest.raises(InvalidConfig, match="use defer_many_async"):
                resize.defer_many(aq, [{"path": "a"}])  # its add_many is a coroutine
            with pytest.raises(InvalidTask, match="call 1 of the batch") as refused:
                await resize.defer_many_async(aq, [{"path": "a"}, {"width": 1}])
            assert refused.value.index == 1
            return await resize.defer_many_async(aq, [{"path": "a"}, {"path": "b"}], priority=2)

    ids = asyncio.run(main())
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        assert [(t.task_id, t.payload, t.priority) for t in q.tasks()] == [
            (ids[0], {"path": "a"}, 2),
            (ids[1], {"path": "b"}, 2),
        ]
        with pytest.raises(InvalidConfig, match=r"take a sqlq\.AsyncQueue, not Queue"):
            asyncio.run(resize.defer_many_async(q, [{"path": "a"}]))  # type: ignore[arg-type]
        assert len(q.tasks()) == 2


# --- the worker runs each task by its name -----------------------------------------------


def _registry(log: list[Any]) -> sqlq.Tasks:
    tasks = sqlq.Tasks()

    @tasks.task(name="a")
    def a(x: int) -> None:
        log.append(("a", x))

    @tasks.task(name="b")
    def b(text: str = "none") -> None:
        log.append(("b", text))

    @tasks.task(name="gives-up")
    def gives_up() -> None:
        raise NotRetryable("this input can never work")

    return tasks


def test_a_worker_routes_each_task_by_name_and_dead_letters_what_it_cannot_run(
    queue_url: str,
) -> None:
    log: list[Any] = []
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=4) as q:
        q.add("a1", payload={"x": 1}, name="a")
        q.add("b1", name="b")  # no payload: no arguments
        q.add("b2", payload={"text": "hi"}, name="b")
        q.add("unknown", payload={}, name="x")
        q.add("unnamed", payload={"x": 1})
        q.add("not-an-object", payload=[1], name="a")
        q.add("wrong-args", payload={"y": 1}, name="a")
        q.add("gives-up", name="gives-up")
        stats = Worker(q, _registry(log)).run(stop_when_idle=True, install_signal_handlers=False)
        found = {t.task_id: t for t in q.tasks()}
    assert sorted(log) == [("a", 1), ("b", "hi"), ("b", "none")]
    assert stats.completed == 3 and stats.failed == 5
    assert {i for i, t in found.items() if t.state == "COMPLETED"} == {"a1", "b1", "b2"}
    dead = {i: t.last_error for i, t in found.items() if t.state == "DEAD"}
    assert dead == {
        "unknown": "no task named 'x' is registered in this worker (known: a, b, gives-up)",
        "unnamed": "the task has no name; this worker runs registered tasks only "
        "(known: a, b, gives-up)",
        "not-an-object": "task 'a' takes its arguments as a mapping (a JSON object) of names "
        "to values, not list",
        "wrong-args": "task 'a' cannot take these arguments: missing a required argument: 'x'",
        "gives-up": "this input can never work",
    }
    assert all(found[i].attempts == 4 for i in dead)  # DEAD at the first attempt


def test_a_plain_handler_gets_a_named_tasks_payload(queue_url: str) -> None:
    seen: list[Any] = []
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=4) as q:
        q.add("n", payload={"x": 1}, name="anything")
        Worker(q, seen.append).run(stop_when_idle=True, install_signal_handlers=False)
        assert q.status("n") == "COMPLETED"
    assert seen == [{"x": 1}]


def test_a_handler_that_raises_otherwise_is_retried(
    queue_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "sqlq.worker")
    tasks = sqlq.Tasks()

    @tasks.task(name="flaky", max_attempts=2)
    def flaky() -> None:
        raise ValueError("try again")

    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        flaky.enqueue(q, {}, task_id="f")
        stats = Worker(q, tasks).run(stop_when_idle=True, install_signal_handlers=False)
        info = q.info("f")
    assert stats.failed == 2  # its own max_attempts, not the queue's
    assert (info.state, info.attempts, info.last_error) == ("DEAD", 2, "ValueError: try again")
    started = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("worker started")
    ]
    assert len(started) == 1 and started[0].endswith("; tasks flaky")
    # Every task event names the task, in the line and in the record's extra.
    dead = [r for r in caplog.records if r.getMessage().startswith("task dead")]
    assert len(dead) == 1 and " task_name=flaky " in dead[0].getMessage()
    assert getattr(dead[0], "task_name", None) == "flaky"


# --- the check at worker start -----------------------------------------------------------


def _takes_nothing() -> None: ...


def _takes_two(a: int, b: int) -> None: ...


def _keyword_only(*, payload: object) -> None: ...


@pytest.mark.parametrize("handler", [_takes_nothing, _takes_two, _keyword_only, lambda: None])
def test_a_handler_that_cannot_take_a_task_is_refused(handler: Any, queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        q.add("t")
        with pytest.raises(InvalidConfig, match="cannot be called with one argument"):
            Worker(q, handler)
        assert q.info("t").attempts == 0


def test_handlers_that_take_one_argument_are_accepted(queue_url: str) -> None:
    def with_defaults(payload: object, extra: int = 1) -> None: ...

    def star(*args: object) -> None: ...

    class Handler:
        def __call__(self, payload: object) -> None: ...

    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        for handler in [with_defaults, star, Handler(), print, _registry([])]:
            Worker(q, handler)


@pytest.mark.parametrize(
    ("handler", "options", "said"),
    [
        (5, {}, "handler must be callable or a sqlq.Tasks, not int"),
        (sqlq.Tasks(), {"with_lease": True}, "with_lease is for a plain handler"),
    ],
)
def test_what_a_worker_cannot_run_is_refused(
    handler: Any, options: dict[str, Any], said: str, queue_url: str
) -> None:
    with (
        sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q,
        pytest.raises(InvalidConfig, match=said),
    ):
        Worker(q, handler, **options)


# --- `sqlq worker DB module:tasks`, real processes ---------------------------------------

REGISTRY = """
import os
import sqlq

tasks = sqlq.Tasks()


def _append(line):
    with open(os.environ["TASKS_LOG"], "a") as log:
        log.write(line + "\\n")


@tasks.task(name="resize")
def resize(path, width):
    _append(f"resize {path} {width}")


@tasks.task(name="mail", max_attempts=2)
def mail(to):
    if to == "nobody":
        raise ValueError("no such address")
    _append(f"mail {to}")


def takes_nothing():
    _append("called")
"""


def _run_worker(tmp_path: Path, url: str, target: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "cli_tasks.py").write_text(textwrap.dedent(REGISTRY))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
        "TASKS_LOG": str(tmp_path / "tasks.log"),
    }
    return subprocess.run(
        [sys.executable, "-m", "sqlq", "worker", url, target, "--burst", "--grace", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _rows(url: str) -> dict[str, tuple[Any, ...]]:
    """task id -> (name, state, attempts, last error), as stored."""
    columns = ("task_id", "name", "state", "attempts", "last_error")
    tasks = sa.table("sqlq_tasks", *map(sa.column, columns))
    with sqlq.Queue(url, lease_seconds=30, max_attempts=5) as q, q.engine.connect() as conn:
        return {row[0]: tuple(row[1:]) for row in conn.execute(sa.select(tasks))}


def test_sqlq_worker_runs_a_registry_by_name(tmp_path: Path, queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        q.add("r1", payload={"path": "a.png", "width": 640}, name="resize")
        q.add("m1", payload={"to": "ann"}, name="mail")
        q.add("m2", payload={"to": "nobody"}, name="mail", max_attempts=2)
        q.add("x1", payload={"to": "ann"}, name="fax")
    proc = _run_worker(tmp_path, queue_url, "cli_tasks:tasks")
    assert proc.returncode == 0, proc.stderr
    assert sorted((tmp_path / "tasks.log").read_text().splitlines()) == [
        "mail ann",
        "resize a.png 640",
    ]
    assert _rows(queue_url) == {
        "r1": ("resize", "COMPLETED", 1, None),
        "m1": ("mail", "COMPLETED", 1, None),
        "m2": ("mail", "DEAD", 2, "ValueError: no such address"),
        "x1": (
            "fax",
            "DEAD",
            5,
            "no task named 'fax' is registered in this worker (known: mail, resize)",
        ),
    }


def test_sqlq_worker_refuses_a_handler_that_takes_nothing_before_claiming(
    tmp_path: Path, queue_url: str
) -> None:
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        q.add_many(["t1", "t2"])
    before = _rows(queue_url)
    proc = _run_worker(tmp_path, queue_url, "cli_tasks:takes_nothing")
    assert proc.returncode == 1
    assert "handler 'takes_nothing' cannot be called with one argument" in proc.stderr
    assert _rows(queue_url) == before == {t: (None, "AVAILABLE", 0, None) for t in ("t1", "t2")}
    assert not (tmp_path / "tasks.log").exists()


def test_resolve_target_accepts_a_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli_tasks_resolved.py").write_text(textwrap.dedent(REGISTRY))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(resolve_target("cli_tasks_resolved:tasks"), sqlq.Tasks)


# --- sqlq add --name ----------------------------------------------------------------------


def test_sqlq_add_with_a_name(tmp_path: Path, queue_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sqlq", "add", queue_url, "a", "b", "--name", "resize",
         "--payload", json.dumps({"path": "p", "width": 1})],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        assert [(t.task_id, t.name) for t in q.tasks()] == [("a", "resize"), ("b", "resize")]
    bad = subprocess.run(
        [sys.executable, "-m", "sqlq", "add", queue_url, "c", "--name", ""],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "task name must not be empty" in bad.stderr


# --- mistakes a new user makes (found by trying it as one) --------------------------------


def test_a_task_is_added_only_to_a_queue_that_can_take_it(queue_url: str) -> None:
    tasks = sqlq.Tasks()

    @tasks.task(name="f")
    def f(a: int) -> None: ...

    async def with_an_async_queue() -> None:
        async with sqlq.AsyncQueue(queue_url, lease_seconds=30, max_attempts=2) as aq:
            with pytest.raises(InvalidConfig, match="use defer_async or enqueue_async"):
                f.defer(aq, a=1)  # its add is a coroutine: nothing would be stored
            assert (await aq.counts())["AVAILABLE"] == 0

    asyncio.run(with_an_async_queue())
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=2) as q:
        with pytest.raises(InvalidConfig, match=r"take a sqlq\.AsyncQueue, not Queue"):
            asyncio.run(f.defer_async(q, a=1))  # type: ignore[arg-type]
        with pytest.raises(InvalidConfig, match=r"sqlq\.Queue or sqlq\.WorkQueue, not str"):
            f.defer(queue_url, a=1)
        assert q.counts()["AVAILABLE"] == 0
    memory = sqlq.WorkQueue(lease_seconds=30, max_attempts=2)
    with pytest.raises(InvalidConfig, match="pass now="):
        f.defer(memory, a=1)
    assert f.enqueue(memory, {"a": 1}, task_id="m", now=0) == "m"


def test_arguments_too_large_to_store_are_an_invalid_task(queue_url: str) -> None:
    tasks = sqlq.Tasks()

    @tasks.task(name="g")
    def g(data: str) -> None: ...

    with (
        sqlq.Queue(queue_url, lease_seconds=30, max_attempts=2, max_payload_bytes=1024) as q,
        pytest.raises(InvalidTask, match="cannot be stored"),
    ):
        g.defer(q, data="x" * 2048)


def test_a_worker_refuses_what_would_lose_every_task(queue_url: str) -> None:
    tasks = sqlq.Tasks()

    @tasks.task(name="charge")
    def charge(order: int) -> None: ...

    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=2) as q:
        with pytest.raises(
            InvalidConfig, match="one registered task: give the worker its registry"
        ):
            Worker(q, charge)
        with pytest.raises(InvalidConfig, match="has no tasks"):
            Worker(q, sqlq.Tasks())
    with pytest.raises(InvalidConfig, match=r"takes a sqlq\.Queue .* not str"):
        Worker(queue_url, tasks)  # type: ignore[arg-type]


def _gen(payload: Any) -> Any:
    yield payload


async def _agen(payload: Any) -> Any:
    yield payload


@pytest.mark.parametrize("fn", [_gen, _agen])
def test_generator_functions_are_refused_as_handlers_and_tasks(fn: Any, queue_url: str) -> None:
    """Calling one runs none of its body: its task would complete without running."""
    with pytest.raises(InvalidConfig, match="generator function"):
        sqlq.Tasks().task(name="g")(fn)
    with (
        sqlq.Queue(queue_url, lease_seconds=30, max_attempts=2) as q,
        pytest.raises(InvalidConfig, match="generator function"),
    ):
        Worker(q, fn)


def test_a_task_defined_in_a_script_needs_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as a script, a module is __main__, a name no worker can import it by; run
    with python -m, it has its own."""
    main = type(sys)("__main__")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec("def hello(): pass", namespace)
    monkeypatch.setitem(sys.modules, "__main__", main)
    main.__spec__ = None
    with pytest.raises(InvalidConfig, match=r"script run as __main__.*name="):
        sqlq.Tasks().task(namespace["hello"])
    assert sqlq.Tasks().task(name="hello")(namespace["hello"]).name == "hello"
    main.__spec__ = type("Spec", (), {"name": "jobs.mail"})()
    assert sqlq.Tasks().task(namespace["hello"]).name == "jobs.mail.hello"
