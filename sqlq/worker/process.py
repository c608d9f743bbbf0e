"""What ``sqlq worker`` runs: ``serve`` opens the queue, resolves the handler named by
``"package.module:function"``, sets up logging and runs a Worker; and how the process
ends past threads a handler left running."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..contract import (
    describe_error,
)
from ..durable import Queue
from ..errors import InvalidConfig
from ..tasks import Tasks
from .lifecycle import Worker

#: Format of the log lines ``serve`` writes to stderr when logging is not configured.
LOG_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"


def resolve_target(target: str) -> Callable[[Any], object] | Tasks:
    """The callable (or ``sqlq.Tasks`` registry) named by ``"package.module:function"``
    (or ``module:Class.method``, ``module:tasks``)."""
    if not isinstance(target, str):
        raise InvalidConfig(f"handler target must be a str, not {type(target).__name__}")
    module_name, colon, path = target.partition(":")
    if not colon or not module_name or not path:
        raise InvalidConfig(f"handler target {target!r} must look like 'package.module:function'")
    try:
        obj: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # not found, or it raised (or exited) on import
        raise InvalidConfig(
            f"handler target {target!r}: cannot import module {module_name!r} "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    for part in path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidConfig(
                f"handler target {target!r}: {module_name!r} has no attribute {path!r}"
            ) from None
    if not callable(obj) and not isinstance(obj, Tasks):
        raise InvalidConfig(
            f"handler target {target!r} is a {type(obj).__name__}, not callable nor a sqlq.Tasks"
        )
    handler: Callable[[Any], object] | Tasks = obj
    return handler


def _cwd_importable() -> None:
    """Let ``module:function`` name modules in the current directory, as ``python -m``
    does (the ``sqlq`` console script does not put it on sys.path).  Appended, so
    it never shadows an installed package."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def exit_past_lingering_threads(code: int, error: BaseException | None = None) -> None:
    """What ``sqlq worker`` does once its worker has stopped (``code``: its exit code;
    ``error``: what ``serve`` raised): nothing, unless threads that are not daemon
    threads still run (a handler started one and left it running), which would keep
    the process alive forever (Python waits for them at exit).  Then it logs a
    warning that names them (and the error, if any), flushes the logs and standard
    streams, and ends the process with ``os._exit(code)`` (1 after an error): the
    worker stopped cleanly, every lease was reported or released, and nothing of
    sqlq's waits for those threads."""
    lingering = [
        thread.name
        for thread in threading.enumerate()
        if not thread.daemon and thread is not threading.main_thread() and thread.is_alive()
    ]
    if not lingering:
        return
    log = logging.getLogger("sqlq.worker")
    if error is not None:
        code = 1
        log.error("worker stopped on an error: %s", describe_error(error))
    log.warning(
        "%d thread(s) that are not daemon threads still run (%s), started by a handler and "
        "never ended; they would keep the process alive, so it exits now (code %d) "
        "without waiting for them",
        len(lingering),
        ", ".join(lingering),
        code,
    )
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)


def serve(
    db: str,
    target: str,
    *,
    queue: str = "default",
    concurrency: int = 1,
    prefetch: int | None = None,
    lease_seconds: float | None = None,
    time_limit: float | None = None,
    grace: float = 30.0,
    stop_when_idle: bool = False,
    stop_when_drained: bool = False,
    log_level: int | str = logging.INFO,
    summary_every: float | None = 60.0,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    metrics_token: str | None = None,
    tracing: bool = False,
    **options: Any,
) -> int:
    """Run a worker on queue ``queue`` of the database ``db`` until stopped; exit code 0.

    ``target`` names the handler, ``"package.module:function"``, or a
    ``sqlq.Tasks`` registry; modules in the current directory can be named.  A
    handler that cannot take a task is refused (InvalidConfig) before anything
    is claimed.  sqlq's loggers log at ``log_level`` and up, to stderr unless the
    root logger already has handlers; every ``summary_every`` seconds (None or 0:
    never) the worker logs a summary; ``metrics_port`` (``metrics_host``,
    ``metrics_token``) serves its metrics and ``tracing`` makes a span of each task
    run (see Worker).  Stops on SIGTERM or SIGINT when run in the
    main thread (see the module docstring).  ``options`` are the backend's, as
    for ``Queue`` (on SQLite: ``synchronous``, ``busy_timeout``).
    """
    _cwd_importable()
    handler = resolve_target(target)
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=log_level, format=LOG_FORMAT)
    logging.getLogger("sqlq").setLevel(log_level)
    with Queue(
        db,
        lease_seconds=lease_seconds,  # None: the queue's stored settings (sqlq.settings)
        queue=queue,
        **options,
    ) as opened:
        worker = Worker(
            opened,
            handler,
            concurrency=concurrency,
            prefetch=prefetch,
            time_limit=time_limit,
            grace=grace,
            summary_every=summary_every,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            metrics_token=metrics_token,
            tracing=tracing,
        )
        worker.run(stop_when_idle=stop_when_idle, stop_when_drained=stop_when_drained)
    return 0
