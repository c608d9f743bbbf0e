"""Retry policies: how long a failed or expired attempt waits before it runs again.

A policy is fixed when a task is added and stored with it (like max_attempts),
so every process that handles the task's failure applies the same one.

* ``Retry.immediate()`` (the default, the core contract): straight back to the
  end of the line.
* ``Retry.fixed(seconds)``: WAITING for ``seconds``, then the end of the line.
* ``Retry.exponential(base, cap, jitter=True)``: after the n-th failed attempt
  wait ``min(cap, base * 2**(n-1))`` seconds, or with full jitter a uniformly
  random time between 0 and that.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

from .errors import InvalidConfig

Kind = Literal["immediate", "fixed", "exponential", "exponential_jitter"]
KINDS: Final[tuple[Kind, ...]] = ("immediate", "fixed", "exponential", "exponential_jitter")
MAX_DELAY: Final = 10**9


@dataclass(frozen=True)
class Retry:
    kind: Kind = "immediate"
    base: float = 0.0
    cap: float = 0.0

    @classmethod
    def immediate(cls) -> Retry:
        return cls()

    @classmethod
    def fixed(cls, seconds: float) -> Retry:
        seconds = _seconds(seconds, "seconds")  # named as the caller named it
        return cls("fixed", seconds, seconds)

    @classmethod
    def exponential(cls, base: float, cap: float, *, jitter: bool = True) -> Retry:
        return cls("exponential_jitter" if jitter else "exponential", base, cap)

    def __post_init__(self) -> None:
        """Every policy is checked here, however it is built, so both faces of the
        queue refuse the same ones (the numbers are stored as floats)."""
        if self.kind not in KINDS:
            raise InvalidConfig(f"unknown retry kind {self.kind!r}")
        base, cap = _seconds(self.base, "base"), _seconds(self.cap, "cap")
        if cap < base:
            raise InvalidConfig(f"cap ({cap}) must not be below base ({base})")
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "cap", cap)

    def delay(self, attempts: int, rng: random.Random) -> float:
        """Seconds to wait after ``attempts`` attempts have failed (attempts >= 1)."""
        if self.kind == "immediate":
            return 0
        if self.kind == "fixed":
            return self.base
        # 2**(n-1) overflows float past n ~ 1024; the cap is reached long before.
        exponent = min(attempts - 1, 1100)
        ceiling = min(self.cap, self.base * math.ldexp(1.0, exponent))
        if self.kind == "exponential":
            return ceiling
        return rng.uniform(0, ceiling)


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidConfig(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not 0 <= value <= MAX_DELAY:
        raise InvalidConfig(f"{what} must be between 0 and {MAX_DELAY} seconds, got {value!r}")
    return float(value)


@lru_cache(maxsize=64)
def stored_policy(kind: Kind, base: float, cap: float) -> Retry:
    """The policy of a task as a backend reads it back (one object per policy)."""
    return Retry(kind, base, cap)
