"""The checks of a batch call's items (add_many's tasks, the completions and failures
of complete_many and settle_and_claim), all made before anything is written."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import payload as payloads
from ..errors import InvalidArgument
from .checks import check_flag, check_new_task_id, check_task_id, check_task_name, check_token
from .error_text import check_error
from .states import MAX_BATCH, MAX_ID_LENGTH


def check_batch(
    items: Iterable[str | tuple[str, Any] | tuple[str, Any, str | None]], max_payload_bytes: int
) -> list[tuple[str, payloads.Encoded, str | None]]:
    """Validate a whole batch (ids, (id, payload) pairs or (id, payload, task name)
    triples) before anything is written."""
    if isinstance(items, str | bytes):
        raise InvalidArgument("add_many takes an iterable of ids or (id, payload) pairs")
    batch: list[tuple[str, payloads.Encoded, str | None]] = []
    append = batch.append
    for item in items:
        if type(item) is str and 0 < len(item) <= MAX_ID_LENGTH and item.isascii():
            append((item, None, None))  # a plain id: what check_task_id would return
        else:
            name = None
            if isinstance(item, tuple):
                if len(item) == 3:
                    task_id, payload, name = item
                elif len(item) == 2:
                    task_id, payload = item
                else:
                    raise InvalidArgument(
                        "a batch item is an id, an (id, payload) pair or an "
                        "(id, payload, task name) triple"
                    )
            else:
                task_id, payload = item, None
            append(
                (
                    check_new_task_id(task_id),
                    payloads.encode(payload, max_payload_bytes),
                    check_task_name(name),
                )
            )
        if len(batch) > MAX_BATCH:
            raise InvalidArgument(f"a batch holds at most {MAX_BATCH} tasks")
    return batch


def check_failures(failed: object) -> list[tuple[str, int, str | None, bool]]:
    """(task id, token, error text, retry) from (task id, token, error) triples or
    (task id, token, error, retry) quadruples, all checked before anything is
    written; the error and ``retry`` as ``fail`` takes them."""
    wrong = "failed takes (task id, token, error) triples or (task id, token, error, retry)"
    items = []
    for item in iterable_of(failed, wrong):
        if not (isinstance(item, tuple) and len(item) in (3, 4)):
            raise InvalidArgument(wrong)
        task_id, token, error, *retry = item
        items.append(
            (
                check_task_id(task_id),
                check_token(token),
                check_error(error),
                check_flag(retry[0] if retry else True, "retry"),
            )
        )
        check_batch_size(items)
    return items


def iterable_of(items: object, wrong: str) -> Iterable[object]:
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise InvalidArgument(wrong)
    return items


def check_batch_size(items: list[Any]) -> None:
    if len(items) > MAX_BATCH:
        raise InvalidArgument(f"a batch holds at most {MAX_BATCH} tasks")
