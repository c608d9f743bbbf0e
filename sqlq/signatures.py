"""What a function can be called with, for a task or a worker's handler.

A task's function is called with its payload as keyword arguments, a plain handler
with one positional argument (the payload or the lease).  These checks read a
function's signature once, when it is registered or a worker is made, so that a
function that could never run a task is refused then (InvalidConfig), not task by
task: a generator function (its call runs none of its body), positional-only
parameters or only ``*args`` for a task, a handler that cannot take one argument.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable

from .errors import InvalidConfig

__all__ = ["NAMED", "check_takes_one", "default_name", "keyword_signature"]


def refuse_generator(fn: Callable[..., object], what: str) -> None:
    """A generator function's call returns a generator and runs none of its body: as
    a task it would be completed without running."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise InvalidConfig(
            f"{what} is a generator function (it yields): calling it runs none of its body, "
            "so the task would complete without running; return instead of yielding"
        )


def check_takes_one(handler: Callable[..., object]) -> None:
    """InvalidConfig unless a plain handler can be called with one argument."""
    refuse_generator(handler, f"handler {_describe(handler)}")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # no signature to look at (some builtins): trust it
        return
    try:
        signature.bind(None)
    except TypeError as exc:
        raise InvalidConfig(
            f"handler {_describe(handler)} cannot be called with one argument (the task's "
            f"payload), so it would fail every task: {exc}"
        ) from None


def keyword_signature(fn: Callable[..., object], name: str) -> inspect.Signature:
    """The signature of a task's function, which must take its arguments by keyword."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise InvalidConfig(f"task {name!r}: cannot read the function's signature") from exc
    refuse_generator(fn, f"task {name!r}")
    params = signature.parameters.values()
    positional = [p.name for p in params if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if positional:
        raise InvalidConfig(
            f"task {name!r}: parameters {', '.join(positional)} are positional-only, but a "
            "task's arguments are passed by keyword"
        )
    kinds = {p.kind for p in params}
    if inspect.Parameter.VAR_POSITIONAL in kinds and not kinds & _BY_KEYWORD:
        raise InvalidConfig(
            f"task {name!r} takes only *args, but a task's arguments are passed by keyword"
        )
    return signature


#: Kinds of parameters that a call by keyword names (not ``**kwargs``).
NAMED = {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}

#: Kinds of parameters that take keyword arguments.
_BY_KEYWORD = {
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
    inspect.Parameter.VAR_KEYWORD,
}


def default_name(fn: Callable[..., object]) -> str:
    """A task's name when none is given: ``module.qualname``, by a name a worker imports."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if module == "__main__":
        # Run with python -m, the module has its importable name; run as a script, it
        # has none a worker could import it by.
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = getattr(spec, "name", None)
        if not module or module == "__main__":
            raise InvalidConfig(
                f"task {qualname!r} is defined in a script run as __main__, which a worker "
                "cannot import by that name: give it a name (@tasks.task(name=...)) or "
                "define it in a module that both import"
            )
    return qualname if module is None else f"{module}.{qualname}"


def _describe(handler: Callable[..., object]) -> str:
    return repr(getattr(handler, "__qualname__", handler))
