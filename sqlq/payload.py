"""Task payloads: JSON values, or bytes as they are.  Never pickle.

A payload is stored as JSON text (readable, and usable with SQLite's json
functions) or, for ``bytes``, as a blob.  What a worker gets back is what JSON
gives back: tuples come back as lists, dict keys must be strings, and NaN or
infinity are refused.  Both faces of the queue store the encoded form, so they
hand back equal values.

JSON is nested at most MAX_DEPTH levels deep (arrays and objects): ``add``
refuses deeper values, and a stored text that is deeper (an older sqlq, an
outside edit) or is not JSON at all counts as one that cannot be decoded:
``decode`` raises InvalidPayload and ``readable`` gives it as Undecodable.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Final

from .errors import InvalidConfig, InvalidPayload, PayloadTooLarge

#: Largest encoded payload accepted by default, in bytes.
DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024
#: Largest value accepted for max_payload_bytes.
MAX_PAYLOAD_BYTES: Final = 64 * 1024 * 1024
#: Deepest nesting of arrays and objects in a JSON payload: far below what json
#: handles at any reasonable call depth, so every payload accepted can be read back.
MAX_DEPTH: Final = 200

Encoded = str | bytes | None

#: A JSON string literal (escapes included): brackets inside it are not nesting.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


@dataclass(frozen=True)
class Undecodable:
    """A stored payload that cannot be decoded, as inspection shows it: the text
    as stored and why it cannot be decoded."""

    text: str
    reason: str


def encode(payload: Any, limit: int) -> Encoded:
    """The stored form of ``payload``; raises InvalidPayload or PayloadTooLarge."""
    if payload is None:
        return None
    if isinstance(payload, bytes | bytearray | memoryview):
        data = bytes(payload)
        size = len(data)
        encoded: Encoded = data
    else:
        try:
            text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except RecursionError:
            raise InvalidPayload(_too_deep()) from None
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(
                f"a payload must be JSON-serialisable or bytes ({exc}); sqlq never pickles"
            ) from None
        check_depth(text)
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidPayload("a payload string contains a lone surrogate") from None
        encoded = text
    if size > limit:
        raise PayloadTooLarge(f"the payload is {size} bytes encoded; the limit is {limit}")
    return encoded


def decode(stored: Encoded, around: int = 0) -> Any:
    """The payload of a stored form; InvalidPayload if it cannot be decoded.

    For JSON text that holds a payload ``around`` levels deep in arrays and
    objects (a line of ``sqlq add --from-file``), its depth is checked as a payload's.
    """
    if stored is None or isinstance(stored, bytes):
        return stored
    if len(stored) > 2 * (MAX_DEPTH + around):  # a shorter text cannot nest too deep
        check_depth(stored, around)
    try:
        # A RecursionError passes: the depth is checked above, so it is the caller's
        # stack that ran out, not the text that is wrong (the call is then undone).
        value = json.loads(stored)
    except ValueError as exc:
        raise InvalidPayload(f"not valid JSON ({exc})") from None
    if not stored.isascii():
        try:
            stored.encode("utf-8")
        except UnicodeEncodeError:  # bytes that were not UTF-8 (see driver.stored_text)
            raise InvalidPayload("the stored text is not valid UTF-8") from None
    return value


def readable(stored: Encoded) -> Any:
    """``decode(stored)``, or an Undecodable for a stored text that cannot be decoded."""
    try:
        return decode(stored)
    except InvalidPayload as exc:
        return Undecodable(str(stored), str(exc))


def check_depth(text: str, around: int = 0) -> None:
    """InvalidPayload if the JSON ``text`` nests arrays and objects deeper than
    MAX_DEPTH (plus ``around``, the levels around a payload).

    A text with at most that many brackets cannot be deeper: the usual case
    costs two scans at C speed and nothing else.
    """
    depth = MAX_DEPTH + around
    if text.count("[") + text.count("{") <= depth:
        return
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > depth:
        raise InvalidPayload(_too_deep())


def _too_deep() -> str:
    return f"JSON nested more than {MAX_DEPTH} deep (arrays and objects); the limit is {MAX_DEPTH}"


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAYLOAD_BYTES:
        raise InvalidConfig(f"max_payload_bytes must be an int from 1 to {MAX_PAYLOAD_BYTES}")
    return limit
