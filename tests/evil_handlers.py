"""Handlers that misbehave in every way a worker must outlive (tests/test_worker_hardening.py,
tests/test_worker_leftovers.py), and ``run_worker``, which runs them.

``handle(payload)`` does what ``payload["kind"]`` names; ``"ok"`` returns 1.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sqlq.errors import NotRetryable

HERE = Path(__file__).parent


def run_worker(db: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, "-m", "sqlq", "worker", db, "evil_handlers:handle", "--burst", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class StrNotText(Exception):
    def __str__(self) -> Any:
        return 42


class ReprRaises(Exception):
    def __str__(self) -> str:
        raise ValueError("no str")

    def __repr__(self) -> str:
        raise ValueError("no repr")


class ClassRaises(Exception):
    @property  # type: ignore[misc]
    def __class__(self) -> Any:
        raise RuntimeError("no class")

    def __str__(self) -> str:
        raise RuntimeError("no str")


class StrExits(Exception):
    def __str__(self) -> str:
        raise SystemExit(3)


class Huge(Exception):
    def __str__(self) -> str:
        return "x" * 5_000_000 + "\n" * 1000


class DeadUnprintable(NotRetryable):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class Custom(BaseException):
    pass


class ItemsRaise(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise RuntimeError("cannot encode me")


class SecondTimeRaises(dict):  # type: ignore[type-arg]
    calls = 0

    def items(self) -> Any:
        SecondTimeRaises.calls += 1
        if SecondTimeRaises.calls > 1:
            raise RuntimeError("encoded once already")
        return super().items()


class StrRaisesRepr(dict):  # type: ignore[type-arg]
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


RAISES: dict[str, Any] = {
    "str_raises": StrRaises,
    "str_not_text": StrNotText,
    "repr_raises": ReprRaises,
    "class_raises": ClassRaises,
    "str_exits": StrExits,
    "huge": Huge,
    "dead_unprintable": DeadUnprintable,
    "system_exit": lambda: SystemExit(5),
    "keyboard_interrupt": KeyboardInterrupt,
    "custom_base": Custom,
}


class ClassRaisesResult:
    @property  # type: ignore[misc]
    def __class__(self) -> Any:
        raise RuntimeError("no class")


RETURNS: dict[str, Any] = {
    "result_class_raises": ClassRaisesResult,
    "result_items_raise": lambda: ItemsRaise(a=1),
    "result_second_encoding_raises": lambda: SecondTimeRaises(a=1),
    "result_repr_raises": lambda: StrRaisesRepr({1j: 2}),
}


async def _cancelled_raises(error: type[BaseException]) -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        raise error() from None


def _fork(payload: dict[str, str], raises: bool) -> object:
    """Fork; the child writes its pid to payload["pids"] and returns (or raises)."""
    pid = os.fork()
    if pid == 0:
        with open(payload["pids"], "a") as out:
            out.write(f"{os.getpid()}\n")
        if raises:
            raise RuntimeError("the child fails")
        return "child"
    return "parent"


async def _fork_async(payload: dict[str, str]) -> object:
    await asyncio.sleep(0)
    return _fork(payload, raises=False)


def handle(payload: dict[str, str]) -> object:
    kind = payload["kind"]
    if kind == "ok":
        return 1
    if kind == "fork_returns":
        return _fork(payload, raises=False)
    if kind == "fork_raises":
        return _fork(payload, raises=True)
    if kind == "fork_async":  # on the worker's event loop
        return _fork_async(payload)
    if kind == "thread_leak":  # a non-daemon thread that outlives the worker's stop
        threading.Thread(
            target=time.sleep, args=(3600,), name="leaked-by-handler", daemon=False
        ).start()
        return 1
    if kind in RAISES:
        raise RAISES[kind]()
    if kind in RETURNS:
        return RETURNS[kind]()
    if kind == "async_cancel_raises":
        return _cancelled_raises(StrRaises)
    if kind == "async_cancel_raises_classless":
        return _cancelled_raises(ClassRaises)
    raise AssertionError(kind)
