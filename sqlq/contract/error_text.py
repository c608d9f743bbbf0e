"""How sqlq writes a failure down: the error text a task keeps (cut at
MAX_ERROR_LENGTH), an exception as 'Type: message' without ever raising, and the
error of a payload that cannot be decoded."""

from __future__ import annotations

from ..errors import InvalidArgument
from .states import MAX_ERROR_LENGTH


def check_error(error: object) -> str | None:
    """The text to record for a failure: a str, or an exception as 'Type: message'."""
    if error is None:
        return None
    if isinstance(error, BaseException):
        error = describe_error(error)
    if not isinstance(error, str):
        raise InvalidArgument(f"error must be a str or an exception, not {type(error).__name__}")
    return _fit(error)


def _fit(text: str) -> str:
    """An error text as stored: cut at MAX_ERROR_LENGTH, lone surrogates replaced."""
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 1] + "…"
    return text.encode("utf-8", "replace").decode("utf-8")


def undecodable_error(exc: Exception) -> str:
    """The last error of a task whose stored payload cannot be decoded.

    ``claim`` never hands such a task out and never stops at it: in the same
    call the task goes to DEAD (all its attempts used) with this error, and the
    claim takes the next task.  ``redrive`` sends it back once it can be read.
    ``reserve``, which hands out only the id, does not read the payload.
    """
    return _fit(f"payload cannot be decoded: {exc}")


def describe_error(exc: BaseException) -> str:
    """'Type: message' of an exception, as sqlq stores and shows it: the one way sqlq
    formats what a handler raised (stored as a task's error, logged, traced).  Never
    raises, whatever the exception's ``__str__``, ``__repr__`` or ``__class__`` do
    (raise, even SystemExit; return something else than a str; a huge text): the
    type is ``type(exc)``'s name, the message ``<str() raised ...>`` if str() fails,
    and the text is cut at MAX_ERROR_LENGTH."""
    try:
        name = type(exc).__name__
        name = name if type(name) is str else "?"
    except BaseException:  # a metaclass's __name__ that raises
        name = "?"
    message, _ = _message(exc)
    return _fit(f"{name}: {message}")


def error_message(exc: BaseException) -> str:
    """``str(exc)`` cut as describe_error cuts it, without the type; describe_error's
    whole text if str() fails.  Never raises."""
    message, printable = _message(exc)
    return _fit(message) if printable else describe_error(exc)


def _message(exc: BaseException) -> tuple[str, bool]:
    """(``str(exc)`` as a plain str cut past MAX_ERROR_LENGTH, True), or (what
    str() raised, False)."""
    try:
        text = str(exc)
        if not isinstance(text, str):  # (str() refuses a non-str; be sure anyway)
            raise TypeError("__str__ returned non-string")
    except BaseException as failure:
        return f"<str() raised {type(failure).__name__}>", False
    return str.__str__(text)[: MAX_ERROR_LENGTH + 1], True  # (a plain str, not a subclass)
