"""The mutation check's mutants still point at the code (tests/mutation_check.py).

A refactor that changes a mutant's original text, or makes it occur twice, would
stop the mutation check before it runs anything; this makes the suite say so at
once, not the next time someone runs the check."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_every_mutant_finds_its_original_text_exactly_once() -> None:
    spec = importlib.util.spec_from_file_location("mutation_check", HERE / "mutation_check.py")
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_check", check)  # (its dataclass looks itself up)
    spec.loader.exec_module(check)
    wrong = {
        m.name: count
        for m in check.MUTANTS
        if (count := (check.ROOT / m.path).read_text("utf-8").count(m.original)) != 1
    }
    assert wrong == {}
    assert len({m.name for m in check.MUTANTS}) == len(check.MUTANTS)  # names are unique
