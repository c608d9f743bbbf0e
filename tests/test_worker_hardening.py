"""A worker outlives whatever its handler raises, returns or leaves behind (issue 23):
real `sqlq worker` processes, one misbehaving task and one good one each."""

from __future__ import annotations

from pathlib import Path

import pytest
from evil_handlers import run_worker

import sqlq
from sqlq.contract import MAX_ERROR_LENGTH

#: The misbehaving kinds (tests/evil_handlers.py) and what their task's stored error says.
KINDS = {
    "str_raises": "StrRaises: <str() raised RuntimeError>",
    "str_not_text": "StrNotText: <str() raised TypeError>",
    "repr_raises": "ReprRaises: <str() raised ValueError>",
    "class_raises": "ClassRaises: <str() raised RuntimeError>",
    "str_exits": "StrExits: <str() raised SystemExit>",
    "huge": "Huge: xxxxxxxx",
    "dead_unprintable": "DeadUnprintable: <str() raised RuntimeError>",
    "system_exit": "SystemExit: 5",
    "keyboard_interrupt": "KeyboardInterrupt: ",
    "custom_base": "Custom: ",
    "result_items_raise": "the result cannot be stored: RuntimeError: cannot encode me",
    "result_class_raises": "the result cannot be stored: RuntimeError: no class",
    "result_second_encoding_raises": "",  # stored, or refused: either, never a crash
    "result_repr_raises": "InvalidPayload: the result cannot be stored",
    "async_cancel_raises": "time limit of 1s exceeded",
    "async_cancel_raises_classless": "time limit of 1s exceeded",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_worker_outlives_a_misbehaving_handler(tmp_path: Path, kind: str) -> None:
    db = str(tmp_path / "q.db")
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
        queue.add("evil", payload={"kind": kind})
        queue.add("good", payload={"kind": "ok"})
    proc = run_worker(db, "--time-limit", "1", "--grace", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "worker error" not in proc.stderr, proc.stderr[-3000:]
    assert "Logging error" not in proc.stderr, proc.stderr[-3000:]
    assert len(proc.stderr) < 100_000  # a huge error text is cut in the log too
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
        good = queue.info("good")
        evil = queue.info("evil")
    assert good is not None and good.state == "COMPLETED", proc.stderr[-3000:]
    assert evil is not None
    if kind == "result_second_encoding_raises":
        assert evil.state in ("COMPLETED", "DEAD")
        return
    assert evil.state == "DEAD", proc.stderr[-3000:]
    assert isinstance(evil.last_error, str)
    assert evil.last_error.startswith(KINDS[kind]), evil.last_error[:200]
    assert len(evil.last_error) <= MAX_ERROR_LENGTH
