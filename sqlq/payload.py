"""Task payloads: JSON values, or bytes as they are.  Never pickle.

A payload is stored as JSON text (readable, and usable with SQLite's json
functions) or, for ``bytes``, as a blob.  What a worker gets back is what JSON
gives back: tuples come back as lists, dict keys must be strings, and NaN or
infinity are refused.  Both faces of the queue store the encoded form, so they
hand back equal values.
"""

from __future__ import annotations

import json
from typing import Any, Final

from .errors import InvalidConfig, InvalidPayload, PayloadTooLarge

#: Largest encoded payload accepted by default, in bytes.
DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024
#: Largest value accepted for max_payload_bytes.
MAX_PAYLOAD_BYTES: Final = 64 * 1024 * 1024

Encoded = str | bytes | None


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
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidPayload(
                f"a payload must be JSON-serialisable or bytes ({exc}); sqlq never pickles"
            ) from None
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidPayload("a payload string contains a lone surrogate") from None
        encoded = text
    if size > limit:
        raise PayloadTooLarge(f"the payload is {size} bytes encoded; the limit is {limit}")
    return encoded


def decode(stored: Encoded) -> Any:
    if stored is None or isinstance(stored, bytes):
        return stored
    return json.loads(stored)


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAYLOAD_BYTES:
        raise InvalidConfig(f"max_payload_bytes must be an int from 1 to {MAX_PAYLOAD_BYTES}")
    return limit
