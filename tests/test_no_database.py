"""An empty database argument (issue 23, item 4): `sqlq web "$DATABASE_URL"` with the
variable unset.  Every command, Queue and AsyncQueue say that no database was given
(sqlq.errors.NoDatabase; exit 2 from the command line), not what a database must be."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import sqlq
from sqlq import cli
from sqlq.errors import NoDatabase

MESSAGE = "no database given: pass a SQLite file path or a postgresql:// URL"


def _argv(name: str, parser: argparse.ArgumentParser, db: str) -> list[str]:
    """The command ``name`` with ``db`` as its database and a value for every other
    argument it requires."""
    argv = [name]
    positionals = [a for a in parser._actions if not a.option_strings]
    for action in positionals:
        if action.dest == "db":
            argv.append(db)
        elif action.nargs != "?":
            argv.append("x:y" if action.dest == "target" else "x")
    if not any(a.dest == "db" for a in positionals):
        (option,) = [a for a in parser._actions if a.dest == "db"]  # e.g. demo --db
        argv += [option.option_strings[0], db]
    return argv


@pytest.mark.parametrize("db", ["", "  "])
@pytest.mark.parametrize("name", sorted(cli.subcommands()))
def test_every_command_says_no_database_was_given(
    name: str,
    db: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # (nothing may be created; if it were, here)
    code = cli.main(_argv(name, cli.subcommands()[name], db))
    _, err = capsys.readouterr()
    assert code == cli.EXIT_USAGE, err
    assert err.splitlines()[-1] == f"sqlq {name}: error: {MESSAGE} (is $DATABASE_URL set?)"


def test_sqlq_web_with_an_unset_variable_says_so() -> None:
    """As a shell runs it: `sqlq web "$DATABASE_URL"`, the variable unset."""
    done = subprocess.run(
        ["sh", "-c", f'unset DATABASE_URL; "{sys.executable}" -m sqlq web "$DATABASE_URL"'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f"{MESSAGE} (is $DATABASE_URL set?)")


@pytest.mark.parametrize("db", ["", " ", "sqlite:///"])
def test_queue_and_async_queue_say_no_database_was_given(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # (nothing may be created; if it were, here)
    for open_ in (sqlq.Queue, sqlq.AsyncQueue):
        with pytest.raises(NoDatabase, match=MESSAGE):
            open_(db)
