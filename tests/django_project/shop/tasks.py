"""The test project's tasks."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from django.db import connection
from django.tasks import TaskContext, task


def _log(line: str) -> None:
    with open(os.environ["SQLQ_DJANGO_LOG"], "a") as log:
        log.write(line + "\n")


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def add_later(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
def boom(message: str) -> None:
    raise ValueError(message)


@task(queue_name="emails")
def send(to: str) -> str:
    _log(f"send {to}")
    return to


@task
def record(label: str) -> dict[str, Any]:
    """Logs its label and when it ran; uses the database as a view would."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    _log(f"{label} {time.time()!r}")
    return {"label": label, "at": time.time()}


@task(takes_context=True)
def stubborn(context: TaskContext, marker: str) -> dict[str, Any]:
    """Its first attempt says it started (a file) and then waits to be killed; a later
    attempt returns at once."""
    if context.attempt == 1:
        Path(marker).write_text(context.task_result.id)
        time.sleep(600)
    return {"attempt": context.attempt, "id": context.task_result.id}
