"""Task ids and error texts as PostgreSQL stores them.

PostgreSQL's ``text`` cannot hold NUL, which a task id (and an error message)
may contain.  Such a text is stored escaped: ``\\`` as ``\\\\`` and NUL as
``\\0``.  The mapping is one-to-one, so ids stay distinct from their near twins,
and a text without either character (nearly all of them) is stored as it is: in
``psql`` only ids with a backslash or NUL look different.
"""

from __future__ import annotations


def stored(text: str) -> str:
    """The form of ``text`` that PostgreSQL can hold."""
    if "\\" in text or "\x00" in text:
        return text.replace("\\", "\\\\").replace("\x00", "\\0")
    return text


def stored_or_none(text: str | None) -> str | None:
    return None if text is None else stored(text)


def read(text: str) -> str:
    """The text that ``stored`` turned into ``text``."""
    if "\\" not in text:
        return text
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            char = "\x00" if next(chars, "\\") == "0" else "\\"
        out.append(char)
    return "".join(out)


def read_or_none(text: str | None) -> str | None:
    return None if text is None else read(text)
