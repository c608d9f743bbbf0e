"""The mutation check's mutants still point at the code (tests/mutation_check.py).

A refactor that changes a mutant's original text, or makes it occur twice, would
stop the mutation check before it runs anything; this makes the suite say so at
once, not the next time someone runs the check."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _mutation_check() -> Any:
    """tests/mutation_check.py as a module (not collected by pytest: no test_ name)."""
    spec = importlib.util.spec_from_file_location("mutation_check", HERE / "mutation_check.py")
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_check", check)  # (its dataclass looks itself up)
    spec.loader.exec_module(check)
    return check


def test_every_mutant_finds_its_original_text_exactly_once() -> None:
    check = _mutation_check()
    wrong = {
        m.name: count
        for m in check.MUTANTS
        if (count := (check.ROOT / m.path).read_text("utf-8").count(m.original)) != 1
    }
    assert wrong == {}
    assert len({m.name for m in check.MUTANTS}) == len(check.MUTANTS)  # names are unique


def test_no_mutant_points_at_migration_text_a_later_migration_replaces() -> None:
    """A mutant of a migration whose text a later migration of the same folder repeats
    (a function or trigger made anew) changes code that no longer runs: it survives
    whatever the tests do (pg-expiry-keeps-the-slot pointed at 0008 after 0010 made
    its function anew)."""
    check = _mutation_check()
    stale = []
    for m in check.MUTANTS:
        path = check.ROOT / m.path
        if "migrations" in path.parts and path.suffix == ".sql":
            later = [p.name for p in sorted(path.parent.glob("*.sql")) if p.name > path.name]
            stale += [(m.name, p) for p in later if m.original in (path.parent / p).read_text()]
    assert stale == []


def test_the_slices_of_the_sample_deal_every_mutant_once() -> None:
    """--sample K: S = ceil(N / K) consecutive commits run every mutant exactly once,
    about K each, and a commit's slice does not depend on the order of the list."""
    check = _mutation_check()
    mutants = check.MUTANTS
    slices = -(-len(mutants) // 30)
    dealt = [check.sample(mutants, 30, number) for number in range(100, 100 + slices)]
    names = [m.name for share in dealt for m in share]
    assert sorted(names) == sorted(m.name for m in mutants)
    assert all(
        len(share) in (len(mutants) // slices, -(-len(mutants) // slices)) for share in dealt
    )
    assert check.sample(mutants[::-1], 30, 7) == check.sample(mutants, 30, 7)
    assert check.sample(mutants, 30, 7) == check.sample(mutants, 30, 7 + slices)
