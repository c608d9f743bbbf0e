"""Tasks by name: a registry of functions, and what a worker runs for a lease.

* :class:`Tasks` maps a task's name to its function.  ``@tasks.task`` (bare, the
  name is ``module.qualname``) or ``@tasks.task(name=..., max_attempts=...,
  retry=..., priority=...)`` registers a function and gives back a :class:`Task`.
* :class:`Task` is still the plain function when called; ``defer(queue,
  **kwargs)`` and ``enqueue(queue, kwargs, ...)`` add a task named after it whose
  payload is the keyword arguments (a JSON object), checked against the
  function's signature first, with the task's own max_attempts, retry and
  priority (``enqueue(..., priority=p)`` overrides the priority for one task).
  ``defer_many(queue, [kwargs, ...])`` adds one task per call in one transaction
  (``Queue.add_many``), every call checked first: all of them or none.
* :func:`runner` turns what a :class:`sqlq.Worker` is given (a plain handler or
  a registry) into the one callable it runs for each lease; it refuses, when
  the worker is made, a handler that could not take a single task.

A lease that a registry cannot run (no function under its name, or a payload
that is no JSON object of arguments the function takes) fails with
:class:`sqlq.errors.NotRetryable`: the worker sends it to DEAD at once, since no
retry can mend it.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, KeysView, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

from .aio import AsyncQueue
from .contract import (
    Number,
    check_max_attempts,
    check_priority,
    check_retry,
    check_task_name,
    describe_error,
    error_message,
)
from .durable import Queue
from .errors import InvalidConfig, InvalidPayload, InvalidTask, NotRetryable, PayloadTooLarge
from .keys import Added
from .memory import WorkQueue
from .payload import encode
from .records import Lease
from .retry import Retry
from .schedule import Schedule, periodic_schedule
from .signatures import NAMED, check_takes_one, default_name, keyword_signature

__all__ = ["Task", "Tasks", "failure", "runner"]

P = ParamSpec("P")
R = TypeVar("R")


class Task(Generic[P, R]):
    """A registered function: call it as the function, or ``defer`` it to a queue."""

    def __init__(
        self,
        fn: Callable[P, R],
        name: str,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
    ) -> None:
        self.fn = fn
        self.name = name
        #: Replace the queue's for tasks added through this Task (None: the queue's).
        self.max_attempts = max_attempts
        self.retry = retry
        #: The priority of tasks added through this Task, unless ``enqueue`` gives one.
        self.priority = priority
        self.signature = keyword_signature(fn, name)
        params = self.signature.parameters.values()
        #: What a call by keyword must name, may name, and may not (positional-only).
        self._required = frozenset(
            p.name for p in params if p.kind in NAMED and p.default is p.empty
        )
        self._named = frozenset(p.name for p in params if p.kind in NAMED)
        self._positional = frozenset(p.name for p in params if p.kind is p.POSITIONAL_ONLY)
        self._more = any(p.kind is p.VAR_KEYWORD for p in params)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<sqlq.Task {self.name!r}>"

    def defer(self, queue: Any, /, **kwargs: Any) -> str | None:
        """Add a task that runs this function with ``kwargs``; its new id (uuid4 hex)."""
        return self.enqueue(queue, kwargs)

    def enqueue(
        self,
        queue: Any,
        kwargs: Mapping[str, Any],
        *,
        task_id: str | None = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        now: Number | None = None,
        conn: Any = None,
        priority: int | None = None,
        key: str | None = None,
        on_key: str | None = None,
        key_window: Number | None = None,
        group: str | None = None,
    ) -> str | None:
        """Add a task that runs this function with ``kwargs``, as ``queue.add`` does
        (``queue`` is a sqlq.Queue or WorkQueue), with ``priority`` (None: this
        Task's), in ``group`` if given (see ``Queue.set_limit``).  Returns the
        task's id (``task_id``, or a new uuid4 hex), or None if ``task_id`` exists
        (and nothing is stored).
        With a dedupe ``key`` (see sqlq.keys): the id of the task that holds it and
        does the work (the new one, or the holder it merged or debounced into), or
        None if the add was refused.

        Raises :class:`sqlq.errors.InvalidTask` before anything is stored if the
        function cannot take ``kwargs`` or they cannot be stored as JSON.
        """
        payload = self.arguments(kwargs)
        _check_queue(queue, now)
        task_id = uuid.uuid4().hex if task_id is None else task_id
        options: dict[str, Any] = {} if conn is None else {"conn": conn}
        # Issue 13's options only when given: an add without them stays on the
        # queue's direct path (Queue.add takes them as **options, through _add).
        rank = self.priority if priority is None else priority
        if rank != 0 or type(rank) is not int:  # (a bad value still gets add's error)
            options["priority"] = rank
        for option, value in (("key", key), ("on_key", on_key), ("key_window", key_window),
                              ("group", group)):  # fmt: skip
            if value is not None:
                options[option] = value
        try:
            added = queue.add(
                task_id,
                now,
                payload=payload,
                delay=delay,
                run_at=run_at,
                name=self.name,
                max_attempts=self.max_attempts,
                retry=self.retry,
                **options,
            )
        except (InvalidPayload, PayloadTooLarge) as exc:
            raise InvalidTask(f"task {self.name!r}: the arguments cannot be stored: {exc}") from exc
        if isinstance(added, Added):
            return added.holder if added else None
        return task_id if added else None

    def defer_many(
        self,
        queue: Any,
        calls: Iterable[Mapping[str, Any]],
        /,
        *,
        delay: Number | None = None,
        run_at: Number | None = None,
        now: Number | None = None,
        conn: Any = None,
        priority: int | None = None,
        group: str | None = None,
    ) -> list[str]:
        """Add one task per item of ``calls`` (each the keyword arguments of one call, as
        ``defer`` takes them), in one transaction (``queue.add_many``): the new tasks'
        ids (uuid4 hex), in order.  The options are those of ``enqueue``, the same for
        every task: ``priority`` (None: this Task's), ``group``, ``delay`` or
        ``run_at``, ``now``, ``conn``.  A dedupe key is one task's: use ``enqueue``.

        All or nothing: every call is checked as ``defer`` checks one before anything
        is stored; if one cannot be run or stored, :class:`sqlq.errors.InvalidTask`
        names the first such (its ``index``) and nothing is stored.
        """
        if isinstance(calls, Mapping | str | bytes):
            raise InvalidTask(
                f"task {self.name!r}: defer_many takes an iterable of calls (each a mapping "
                f"of arguments), not {type(calls).__name__}"
            )
        _check_queue(queue, now, "defer_many_async")
        given: list[dict[str, Any]] = []
        for index, kwargs in enumerate(calls):
            try:
                given.append(self.arguments(kwargs, index))
            except InvalidTask:
                self._unstorable(given, queue.max_payload_bytes)  # an earlier call's, first
                raise
        ids, name = _new_ids(len(given)), self.name
        batch = [(task_id, payload, name) for task_id, payload in zip(ids, given, strict=True)]
        options: dict[str, Any] = {} if conn is None else {"conn": conn}
        try:
            queue.add_many(
                batch,
                now,
                delay=delay,
                run_at=run_at,
                max_attempts=self.max_attempts,
                retry=self.retry,
                priority=self.priority if priority is None else priority,
                group=group,
                **options,
            )
        except (InvalidPayload, PayloadTooLarge):
            self._unstorable(given, queue.max_payload_bytes)
            raise  # pragma: no cover - one of the payloads could not be encoded
        return [task_id for task_id, _, _ in batch]

    def _unstorable(self, given: list[dict[str, Any]], limit: int) -> None:
        """InvalidTask naming the first of the calls ``given`` whose arguments cannot be
        stored (encoded again one by one: only once a call was refused), if any."""
        for index, payload in enumerate(given):
            try:
                encode(payload, limit)
            except (InvalidPayload, PayloadTooLarge) as exc:
                raise _refused(
                    f"task {self.name!r}, call {index} of the batch: the arguments cannot "
                    f"be stored: {exc}",
                    index,
                ) from exc

    async def defer_many_async(
        self,
        queue: AsyncQueue,
        calls: Iterable[Mapping[str, Any]],
        /,
        *,
        delay: Number | None = None,
        run_at: Number | None = None,
        now: Number | None = None,
        priority: int | None = None,
        group: str | None = None,
    ) -> list[str]:
        """``defer_many`` for asyncio programs, on a :class:`sqlq.AsyncQueue`: the same
        checks and answers; the batch is added in the AsyncQueue's thread."""
        _check_async(queue, "defer_many_async", "defer_many")
        call = functools.partial(
            self.defer_many, queue.sync, calls, delay=delay, run_at=run_at, now=now,
            priority=priority, group=group,
        )  # fmt: skip
        return await queue._run(call)

    async def defer_async(self, queue: AsyncQueue, /, **kwargs: Any) -> str | None:
        """``defer`` for asyncio programs: the add runs in the AsyncQueue's thread."""
        return await self.enqueue_async(queue, kwargs)

    async def enqueue_async(
        self,
        queue: AsyncQueue,
        kwargs: Mapping[str, Any],
        *,
        task_id: str | None = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        now: Number | None = None,
        priority: int | None = None,
        key: str | None = None,
        on_key: str | None = None,
        key_window: Number | None = None,
        group: str | None = None,
    ) -> str | None:
        """``enqueue`` for asyncio programs, on a :class:`sqlq.AsyncQueue`: the same
        checks and answers; the add runs in the AsyncQueue's thread, so the event
        loop never waits for the write lock."""
        _check_async(queue, "defer_async and enqueue_async", "defer or enqueue")
        call = functools.partial(
            self.enqueue, queue.sync, kwargs, task_id=task_id, delay=delay, run_at=run_at, now=now,
            priority=priority, key=key, on_key=on_key, key_window=key_window, group=group,
        )  # fmt: skip
        return await queue._run(call)

    def arguments(self, kwargs: object, index: int | None = None) -> dict[str, Any]:
        """``kwargs`` as a dict, if this function can be called with them; else
        InvalidTask (of call ``index`` of a batch, if given)."""
        where = "" if index is None else f", call {index} of the batch,"
        if not isinstance(kwargs, Mapping):
            raise _refused(
                f"task {self.name!r}{where} takes its arguments as a mapping (a JSON object) "
                f"of names to values, not {type(kwargs).__name__}",
                index,
            )
        given = dict(kwargs)
        if not self._takes(given.keys()):
            try:  # the answer, and the words of a refusal, from the signature itself
                self.signature.bind(**given)
            except TypeError as exc:
                raise _refused(
                    f"task {self.name!r}{where} cannot take these arguments: {exc}", index
                ) from None
        return given

    def _takes(self, names: KeysView[Any]) -> bool:
        """Whether a call by keyword that names ``names`` surely binds: every required
        parameter named, and no other name unless the function takes ``**kwargs`` (of
        names that are strings and no positional-only parameter's).  False for what
        the signature itself must tell (a tenth of the time of ``bind``)."""
        if not self._required <= names:
            return False
        if names <= self._named:
            return True
        extra = names - self._named
        return self._more and not extra & self._positional and all(type(n) is str for n in extra)


class Tasks:
    """A registry of tasks by name; give it to ``sqlq.Worker`` (or ``sqlq worker DB
    module:tasks``) to run each task by its name."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._schedules: dict[str, Schedule] = {}

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        *,
        name: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function as a task: ``@tasks.task`` (named ``module.qualname``)
        or ``@tasks.task(name=..., max_attempts=..., retry=..., priority=...)``.  A
        name already registered, a function that cannot take keyword arguments, or a
        priority out of range is refused (InvalidConfig)."""
        limit = None if max_attempts is None else check_max_attempts(max_attempts)
        policy = None if retry is None else check_retry(retry)
        rank = check_priority(priority, InvalidConfig)
        wanted = check_task_name(name, InvalidConfig)

        def register(fn: Callable[P, R]) -> Task[P, R]:
            if not callable(fn):
                raise InvalidConfig(f"a task is a function, not {type(fn).__name__}")
            chosen = wanted or check_task_name(default_name(fn), InvalidConfig)
            assert chosen is not None
            if chosen in self._tasks:
                raise InvalidConfig(f"a task named {chosen!r} is registered already")
            task = Task(fn, chosen, limit, policy, rank)
            self._tasks[chosen] = task
            return task

        return register if fn is None else register(fn)

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: int | None = None,
        tz: str = "UTC",
        catch_up: str = "latest",
        grace: Number = 60,
        kwargs: Mapping[str, Any] | None = None,
        schedule: str | None = None,
        name: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function as a task (as ``task`` does, unless it is a Task of this
        registry already) and run it periodically: ``@tasks.periodic(cron="*/5 * * *
        *", tz="Europe/Paris")`` or ``every=`` seconds (see sqlq.schedule).  Its payload
        is ``kwargs``, and the tick (Unix seconds) if the function has a ``tick``
        parameter.  The schedule is named ``schedule`` (default: the task's name); a
        Worker given this registry runs it.  Bad arguments are InvalidConfig."""
        options = {
            "cron": cron, "every": every, "tz": tz, "catch_up": catch_up, "grace": grace,
            "kwargs": {} if kwargs is None else kwargs,
        }  # fmt: skip

        def register(fn: Callable[P, R]) -> Task[P, R]:
            if isinstance(fn, Task) and self._tasks.get(fn.name) is fn:
                task: Task[P, R] = fn
            else:
                task = self.task(name=name, max_attempts=max_attempts, retry=retry)(fn)
            try:
                self._schedule(task, schedule, options)
            except InvalidConfig:
                if task is not fn:  # registered here: not kept without its schedule
                    del self._tasks[task.name]
                raise
            return task

        return register

    def _schedule(self, task: Task[Any, Any], name: str | None, options: dict[str, Any]) -> None:
        """Add the schedule of ``periodic`` for ``task``."""
        found = periodic_schedule(
            task.fn,
            task.name,
            name,
            {**options, "max_attempts": task.max_attempts, "retry": task.retry},
        )
        self.check_runs(found)
        if found.name in self._schedules:
            raise InvalidConfig(f"a schedule named {found.name!r} is registered already")
        self._schedules[found.name] = found

    def check_runs(self, schedule: Schedule) -> None:
        """InvalidConfig unless this registry runs the tasks ``schedule`` adds: a task
        registered by its name, whose function takes its payload."""
        task = None if schedule.task is None else self._tasks.get(schedule.task)
        if task is None:
            known = ", ".join(sorted(self._tasks)) or "none"
            raise InvalidConfig(
                f"schedule {schedule.name!r}: its task {schedule.task!r} is not registered "
                f"in this registry (known: {known})"
            )
        try:
            task.arguments(schedule.payload(0))
        except InvalidTask as exc:
            raise InvalidConfig(f"schedule {schedule.name!r}: {exc}") from None

    @property
    def schedules(self) -> list[Schedule]:
        """The schedules of ``periodic``, in the order they were declared."""
        return list(self._schedules.values())

    def __getitem__(self, name: str) -> Task[Any, Any]:
        return self._tasks[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[str]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def __repr__(self) -> str:
        return f"<sqlq.Tasks {sorted(self._tasks)}>"

    def run(self, lease: Lease) -> object:
        """Run the task a lease holds: its function called with the payload's keyword
        arguments.  NotRetryable if it cannot be run here."""
        task = None if lease.name is None else self._tasks.get(lease.name)
        if task is None:
            known = ", ".join(sorted(self._tasks)) or "none"
            if lease.name is None:
                raise NotRetryable(
                    f"the task has no name; this worker runs registered tasks only (known: {known})"
                )
            raise NotRetryable(
                f"no task named {lease.name!r} is registered in this worker (known: {known})"
            )
        try:
            kwargs = task.arguments({} if lease.payload is None else lease.payload)
        except InvalidTask as exc:
            raise NotRetryable(str(exc)) from None
        return task.fn(**kwargs)


def runner(handler: object, with_lease: bool) -> Callable[[Lease], object]:
    """What a worker calls for each lease: ``handler(payload)`` (or ``handler(lease)``
    with ``with_lease``), or a Tasks registry's ``run``.  InvalidConfig if the
    handler is not callable or cannot take one positional argument (it would
    fail every task), or if ``with_lease`` is asked of a registry."""
    if isinstance(handler, Tasks):
        if with_lease:
            raise InvalidConfig("with_lease is for a plain handler; registered tasks get kwargs")
        if not handler:
            raise InvalidConfig(
                "the sqlq.Tasks registry has no tasks: every task would go DEAD as unknown "
                "(is the module that registers them imported?)"
            )
        return handler.run
    if isinstance(handler, Task):
        raise InvalidConfig(
            f"{handler!r} is one registered task: give the worker its registry (the "
            "sqlq.Tasks it was registered with, module:tasks on the command line), which "
            "runs each task by its name"
        )
    if not callable(handler):
        raise InvalidConfig(
            f"handler must be callable or a sqlq.Tasks, not {type(handler).__name__}"
        )
    check_takes_one(handler)
    if with_lease:
        return handler
    return lambda lease: handler(lease.payload)


def _check_queue(
    queue: object, now: Number | None, instead: str = "defer_async or enqueue_async"
) -> None:
    if isinstance(queue, AsyncQueue):
        raise InvalidConfig(f"an AsyncQueue's add is a coroutine: use {instead}")
    if isinstance(queue, WorkQueue):
        if now is None:
            raise InvalidConfig("a WorkQueue takes the time of every call: pass now=")
    elif not isinstance(queue, Queue):
        raise InvalidConfig(
            f"a task is added to a sqlq.Queue or sqlq.WorkQueue, not {type(queue).__name__}"
        )


def _new_ids(n: int) -> list[str]:
    """``n`` new task ids, each as ``uuid.uuid4().hex`` gives one (random, with the
    version and variant bits of a version 4 UUID), from one read of the system's
    random source: a ninth of the time of ``n`` uuid4() calls."""
    raw = bytearray(os.urandom(16 * n))
    raw[6::16] = bytes(b & 0x0F | 0x40 for b in raw[6::16])  # version 4
    raw[8::16] = bytes(b & 0x3F | 0x80 for b in raw[8::16])  # variant RFC 4122
    text = raw.hex()
    return [text[i : i + 32] for i in range(0, 32 * n, 32)]


def _check_async(queue: object, these: str, instead: str) -> None:
    if not isinstance(queue, AsyncQueue):
        raise InvalidConfig(
            f"{these} take a sqlq.AsyncQueue, not {type(queue).__name__} (use {instead})"
        )


def _refused(message: str, index: int | None) -> InvalidTask:
    """InvalidTask saying ``message``, of call ``index`` of a batch (None: of one call)."""
    exc = InvalidTask(message)
    exc.index = index
    return exc


def failure(error: BaseException) -> tuple[str, bool]:
    """How a worker reports a handler's exception: (error text, retry).  NotRetryable
    sends the task to DEAD at once with its message; anything else is retried by the
    queue's policy, with the error's 'Type: message'.  Never raises (see
    contract.describe_error): the type is ``type(error)``, never its ``__class__``."""
    if issubclass(type(error), NotRetryable):
        return error_message(error), False
    return describe_error(error), True
