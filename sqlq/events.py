"""The worker's log lines: one event per line, ``what key=value ...``, parseable.

The same values go in the record's ``extra`` (attributes of the record), so a
JSON formatter can emit them as fields.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from .records import Lease

#: Fields given in seconds: written with an "s" (``duration=0.003s``).
_SECONDS = frozenset({"duration", "time_limit", "oldest_available", "interval"})
#: A text value written as it is; any other is written as a JSON string.
_PLAIN = re.compile(r"[\w.:/@+-]+")


def task_fields(lease: Lease) -> dict[str, Any]:
    """What identifies a task in the worker's log lines and their ``extra``: the one
    place for what a lease carries about its task, so that every event shows it."""
    fields = {"task_id": lease.task_id, "attempt": lease.attempt, "token": lease.token}
    if lease.name is not None:
        fields["task_name"] = lease.name  # not "name": a LogRecord attribute
    return fields


def event(
    log: logging.Logger,
    level: int,
    what: str,
    fields: dict[str, Any],
    exc_info: BaseException | None = None,
    **more: Any,
) -> None:
    """Log one event on one line: ``event key=value ...``, and the same values
    in the record's ``extra`` (as attributes of the record, for a JSON formatter)."""
    if log.isEnabledFor(level):
        values = {**fields, **more}
        text = " ".join(f"{key}={_text(key, value)}" for key, value in values.items())
        log.log(level, "%s %s", what, text, extra=values, exc_info=exc_info, stacklevel=2)


def _text(key: str, value: Any) -> str:
    """A value as a log line shows it: parseable, and never across lines."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}s" if key in _SECONDS else f"{value:.1f}"
    text = str(value)
    return text if _PLAIN.fullmatch(text) else json.dumps(text)
