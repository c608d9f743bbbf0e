"""Migrations build exactly the schema the code expects, and refuse foreign files."""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from needs import need

import sqlq
from sqlq import schema
from sqlq.errors import Busy, NotASqlqDatabase, SchemaError, SchemaTooNew
from sqlq.sqlite import migrate
from sqlq.sqlite.backend import SqliteBackend
from sqlq.sqlite.driver import dbapi
from sqlq.sqlite.queries import Q, parse


def _norm(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def _reflect(engine: sa.Engine) -> dict[str, Any]:
    inspector = sa.inspect(engine)
    out: dict[str, Any] = {}
    for table in inspector.get_table_names():
        with engine.connect() as conn:  # declared types as written (SQLAlchemy maps ANY away)
            declared = conn.exec_driver_sql(
                'SELECT name, type, NOT "notnull", dflt_value FROM pragma_table_info(?)',
                (table,),
            ).all()
        out[table] = {
            "columns": [(n, t, bool(nullable), d) for n, t, nullable, d in declared],
            "pk": inspector.get_pk_constraint(table)["constrained_columns"],
            "unique": sorted(
                tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)
            ),
            "indexes": sorted(
                (
                    i["name"],
                    tuple(i["column_names"]),
                    bool(i["unique"]),
                    _norm(str(i.get("dialect_options", {}).get("sqlite_where", ""))),
                )
                for i in inspector.get_indexes(table)
            ),
            "checks": sorted(_norm(c["sqltext"]) for c in inspector.get_check_constraints(table)),
        }
    return out


def _expected() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for table in schema.metadata.sorted_tables:
        out[table.name] = {
            "columns": [
                # INTEGER PRIMARY KEY is the rowid alias; SQLite reports it nullable.
                (
                    c.name,
                    str(c.type.compile(dialect=sa.dialects.sqlite.dialect())),
                    bool(c.nullable)
                    or (
                        c.primary_key
                        and len(table.primary_key.columns) == 1
                        and isinstance(c.type, sa.Integer)
                    ),
                    None if c.server_default is None else str(c.server_default.arg),  # type: ignore[attr-defined]
                )
                for c in table.columns
            ],
            "pk": [c.name for c in table.primary_key.columns],
            "unique": sorted(
                tuple(c.name for c in u.columns)
                for u in table.constraints
                if isinstance(u, sa.UniqueConstraint) and not isinstance(u, sa.PrimaryKeyConstraint)
            ),
            "indexes": sorted(
                (
                    i.name,
                    tuple(c.name for c in i.columns),
                    bool(i.unique),
                    _norm(str(i.dialect_options["sqlite"]["where"]))
                    if i.dialect_options["sqlite"]["where"] is not None
                    else "",
                )
                for i in table.indexes
            ),
            "checks": sorted(
                _norm(str(c.sqltext))
                for c in table.constraints
                if isinstance(c, sa.CheckConstraint)
            ),
        }
    return out


def test_migrations_build_the_declared_schema(db_path: Path, migration_files: list[Path]) -> None:
    sqlq.Queue(db_path, lease_seconds=1, max_attempts=1).close()
    engine = sa.create_engine(f"sqlite:///{db_path}", module=dbapi)
    try:
        assert _reflect(engine) == _expected()
        with engine.connect() as conn:
            strict = dict(conn.exec_driver_sql("SELECT name, strict FROM pragma_table_list").all())
            versions = conn.exec_driver_sql("SELECT version, checksum FROM sqlq_migrations").all()
            application_id = conn.exec_driver_sql("PRAGMA application_id").scalar()
    finally:
        engine.dispose()
    assert all(strict[t.name] == 1 for t in schema.metadata.sorted_tables)
    views = sorted(name for name, kind in _objects(db_path) if kind == "view")
    assert views == sorted(schema.VIEWS)
    assert versions == [  # every file, applied once, recorded with its text's SHA-256
        (number, hashlib.sha256(path.read_bytes()).hexdigest())
        for number, path in enumerate(migration_files, start=1)
    ]
    assert application_id == int.from_bytes(b"sqlq", "big")  # "sqlq" in the file header


def _assert_refused_as_foreign_and_untouched(db_path: Path) -> None:
    """Opening the file as a queue is refused; the file is byte-for-byte as it was and
    no file (-wal, -shm, lock) was left beside it."""
    before = _digest(db_path)
    with pytest.raises(NotASqlqDatabase, match="not created by sqlq"):
        sqlq.Queue(db_path, lease_seconds=1, max_attempts=1)
    assert _digest(db_path) == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


def _objects(path: Path) -> list[tuple[str, str]]:
    conn = dbapi.connect(str(path))
    try:
        return [(name, kind) for name, kind in conn.execute("SELECT name, type FROM sqlite_master")]
    finally:
        conn.close()


def test_migrations_are_numbered_from_one() -> None:
    versions = [m.version for m in migrate.migrations()]
    assert versions == list(range(1, len(versions) + 1))
    for m in migrate.migrations():
        assert m.statements(), f"migration {m.version} has no statements"


#: The rows every existing sqlq database holds in sqlq_migrations (one made before
#: the application id is recognised by exactly these): a released migration's
#: text never changes, wherever the file lives.
RELEASED = [
    (1, "initial", "65c8f3b9423813563450d5c9de41d9cd73c10a465f8d29bc74f2097ef716cfec"),
    (2, "worker_features", "f0324bec812d98ae149bba9e30dcdf3dab76bb56b8f3392d518605845fb455bb"),
    (3, "checks_without_lists", "8139ceaa4756a41fb5837ad454233e9e72c093227313f2ea6691250917c5c75d"),
    (4, "application_id", "2df9a5eb7583d79178f83b5cc5cb657e029398cd9dfccfae3079d3f69c84cb37"),
    (5, "task_names", "54037912fe7bd068cfa6d060c3ae4b2724b498e29e531b2cdd7b795fc4c16ef3"),
    (6, "schedules", "24e3dbce600495a95654f36a83b9eb9bf4db170c6c9b83f2926f43835a873788"),
    (7, "cancel_pause", "73fda0b73290fce67a4b8e6cdb8fff20d65460a382f11d6549e24fc1e8aa01c2"),
    (8, "results", "a85e7cc36b532418c429b3ad53de684d0dddb9040fe4c9e61949f7709cf44347"),
    (9, "dedupe_keys", "150932bc0a8809150e019c075f8a0d204e426e396156ebd912fee27e07f98644"),
    (10, "priorities", "26ae284ccbd07fc49930cdcb7de62ae0403ac49762d9d2bf6cf9a724ac49b2e5"),
    (11, "group_limits", "ed91f6abb0c2d9d15e692d6b94d832fc78fb2fcbe99074f3b4d08f1364cf4299"),
    (12, "workers", "0455c002dbe1f783b7ba175c34d3efbde54aaf64318591eeebdef61793ac1dbc"),
    (13, "leaner_tasks", "acdf1c5cafcb3b86ecaace60611206268f422720f2cde094bf9d1dc00cd9eaec"),
    (14, "state_check", "335dee0b5e9e89c6cc7d621a25ebb7d424a23170010619e54f4ecd55e125c63a"),
    (15, "queue_settings", "e40d557875a9b0e4d85c0075a2060353500ebaea194c46a6bb90470731d4ad47"),
    (
        16,
        "readable_stats_times",
        "ec13c8867aa30f09880df75c55fdc5bebd2b0e46d71aa70bd309e2b31d56341a",
    ),
]


def test_released_migrations_keep_their_checksums() -> None:
    shipped = [(m.version, m.name, m.checksum) for m in migrate.migrations()]
    assert shipped[: len(RELEASED)] == RELEASED


#: The rows of SQLite's on-demand migrations (sqlq.sqlite.migrate.on_demand), as
#: released: recorded under the negative of their number.
RELEASED_ON_DEMAND = [
    (-1, "group_triggers", "32973334f54e22679e7bea893e1bb3436248ae5413a201d16a965f723ca09a44"),
    (-2, "key_indexes", "ef483c4e740459f229e2e4a519d974a690e2f1252c524c3dc4773a44cd79963f"),
]


def test_on_demand_migrations_keep_their_checksums_and_numbers() -> None:
    shipped = [(-m.version, m.name, m.checksum) for m in migrate.on_demand()]
    assert shipped[: len(RELEASED_ON_DEMAND)] == RELEASED_ON_DEMAND
    assert [m.version for m in migrate.on_demand()] == list(range(1, len(shipped) + 1))


def _schema_and_records(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int]:
    """Every object of the file with its SQL, the migrations recorded (without their
    time) and sqlq_clock.grouped."""
    conn = dbapi.connect(str(path))
    try:
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name"
        ).fetchall()
        records = conn.execute(
            "SELECT version, name, checksum FROM sqlq_migrations ORDER BY version"
        ).fetchall()
        (grouped,) = conn.execute("SELECT grouped FROM sqlq_clock").fetchone()
    finally:
        conn.close()
    return objects, records, grouped


def test_a_migrated_file_equals_a_fresh_one_before_and_after_the_first_grouped_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file made at version 10 (before groups) and migrated equals a new file, object
    for object, before any grouped add (no trigger, not marked grouped) and after one
    (the on-demand migration of the group triggers applied and recorded, the triggers
    exactly its statements, marked grouped); both still reflect to the declaration."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    sqlq.Queue(fresh, lease_seconds=10, max_attempts=3).close()
    with monkeypatch.context() as m:
        before_groups = migrate.migrations()[:10]
        m.setattr(migrate, "migrations", lambda: before_groups)
        sqlq.Queue(old, lease_seconds=10, max_attempts=3).close()
    sqlq.Queue(old, lease_seconds=10, max_attempts=3).close()  # migrated to the latest
    numbered = [(m.version, m.name, m.checksum) for m in migrate.migrations()]
    for path in (fresh, old):
        objects, records, grouped = _schema_and_records(path)
        assert not [name for kind, name, table, _ in objects if _on_tasks(kind, table)]
        assert (records, grouped) == (numbered, 0)
    assert _schema_and_records(fresh) == _schema_and_records(old)

    triggers = migrate.on_demand()[migrate.GROUP_TRIGGERS - 1]
    for path in (fresh, old):
        with sqlq.Queue(path, lease_seconds=10, max_attempts=3) as q:
            q.add("t", 0, group="g")
            q.add("u", 0, group="h")  # applied once: the record is there
        opened = SqliteBackend(path, migrate=False)  # what `sqlq migrate` reads
        assert opened.schema_versions().current == migrate.latest_version()
        opened.close()
        objects, records, grouped = _schema_and_records(path)
        made = [sql for kind, _, table, sql in objects if _on_tasks(kind, table)]
        assert sorted(made) == sorted(
            _norm_trigger(sql) for sql in triggers.statements() if "CREATE TRIGGER" in sql
        )
        assert (records, grouped) == ([(-1, triggers.name, triggers.checksum), *numbered], 1)
        engine = sa.create_engine(f"sqlite:///{path}", module=dbapi)
        try:
            assert _reflect(engine) == _expected()
        finally:
            engine.dispose()
    assert _schema_and_records(fresh) == _schema_and_records(old)


def _on_tasks(kind: str, table: str) -> bool:
    """Is this object of sqlite_schema a trigger on sqlq_tasks (a group trigger)?"""
    return kind == "trigger" and table == "sqlq_tasks"


def _norm_trigger(statement: str) -> str:
    """A CREATE TRIGGER as sqlite_schema keeps it: its text from CREATE, without the
    final ';'."""
    return statement[statement.index("CREATE TRIGGER") :].rstrip(";")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_foreign_sqlite_database_is_refused_untouched(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices (total) VALUES (9.5)")
    conn.close()
    _assert_refused_as_foreign_and_untouched(db_path)


@pytest.mark.parametrize(
    "records",
    [[], [(1, "initial", "not sqlq's checksum")], [(2, "worker_features", "x")]],
    ids=["empty", "forged", "no-first"],
)
@pytest.mark.parametrize("stamped", [False, True], ids=["no-id", "sqlq-id"])
def test_a_foreign_database_with_a_sqlq_migrations_table_is_refused_untouched(
    db_path: Path, records: list[tuple[int, str, str]], stamped: bool
) -> None:
    """A table name is not enough: without sqlq's application id, the migration
    records must be sqlq's own.  Nor is the id alone: sqlq stamps it in the
    migration that records version BEFORE_APPLICATION_ID + 1, so a file with the
    id and fewer records (another program that chose "sqlq" too) is not sqlq's."""
    with sqlite3.connect(db_path) as conn:
        if stamped:
            conn.execute(f"PRAGMA application_id = {int.from_bytes(b'sqlq', 'big')}")
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute(Q.create_migrations_table)
        conn.executemany("INSERT INTO sqlq_migrations VALUES (?, ?, ?, 0)", records)
    conn.close()
    before = _digest(db_path)
    with pytest.raises(NotASqlqDatabase, match="not created by sqlq"):
        sqlq.Queue(db_path, lease_seconds=1, max_attempts=1)
    with pytest.raises(NotASqlqDatabase, match="not created by sqlq"):
        SqliteBackend(db_path, migrate=False)
    assert _digest(db_path) == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


def test_a_database_made_before_the_application_id_opens_and_gets_it(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version 3 database (what sqlq made before migration 4) is recognised by its
    migration records, and migrating it sets the application id."""
    with monkeypatch.context() as m:
        old = migrate.migrations()[: migrate.BEFORE_APPLICATION_ID]
        m.setattr(migrate, "migrations", lambda: old)
        sqlq.Queue(db_path, lease_seconds=10, max_attempts=2).close()
    with sqlite3.connect(db_path) as conn:  # a task as that version stores it
        conn.execute(
            "INSERT INTO sqlq_tasks (queue, task_id, state, seq, attempts, max_attempts,"
            " created_at, updated_at) VALUES ('default', 'kept', 'AVAILABLE', 1, 0, 2, 0, 0)"
        )
        assert conn.execute("PRAGMA application_id").fetchone() == (0,)
    conn.close()
    with sqlq.Queue(db_path, lease_seconds=10, max_attempts=2) as q:
        assert q.status("kept") == "AVAILABLE"
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (migrate.APPLICATION_ID,)
        assert conn.execute("SELECT max(version) FROM sqlq_migrations").fetchone() == (
            migrate.latest_version(),
        )
    conn.close()


def test_a_file_that_is_not_a_database_is_refused_untouched(db_path: Path) -> None:
    db_path.write_bytes(b"these are my notes, not a database\n" * 100)
    before = _digest(db_path)
    with pytest.raises(NotASqlqDatabase):
        sqlq.Queue(db_path, lease_seconds=1, max_attempts=1)
    assert _digest(db_path) == before


def test_a_newer_schema_is_refused_untouched(db_path: Path) -> None:
    sqlq.Queue(db_path, lease_seconds=1, max_attempts=1).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO sqlq_migrations VALUES (?, 'from_the_future', 'x', 0)",
            (migrate.latest_version() + 1,),
        )
    conn.close()
    before = _digest(db_path)
    with pytest.raises(SchemaTooNew, match="upgrade sqlq") as refused:
        sqlq.Queue(db_path, lease_seconds=1, max_attempts=1)
    assert _digest(db_path) == before
    # The refused open closed its connection: no -wal or -shm file is left behind, and
    # not by the garbage collector (the error's traceback, kept here, holds the frames
    # of the opening).
    left = {p.name for p in db_path.parent.iterdir()}
    assert not left & {f"{db_path.name}-wal", f"{db_path.name}-shm"}, left
    assert refused.tb is not None


def test_an_older_database_is_migrated_forward(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at version 1 gains a later migration when opened by a newer sqlq."""
    q = sqlq.Queue(db_path, lease_seconds=10, max_attempts=2)
    q.add("kept", 0)
    q.close()
    extra = migrate.Migration(
        migrate.latest_version() + 1, "test_extra", "CREATE TABLE sqlq_test_extra (x INTEGER);"
    )
    current = migrate.migrations()
    monkeypatch.setattr(migrate, "migrations", lambda: (*current, extra))
    q = sqlq.Queue(db_path, lease_seconds=10, max_attempts=2)
    assert q.status("kept", 1) == "AVAILABLE"
    q.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT max(version) FROM sqlq_migrations").fetchone() == (
            extra.version,
        )
        assert conn.execute("SELECT count(*) FROM sqlq_test_extra").fetchone() == (0,)
    conn.close()


def test_a_failing_migration_leaves_the_previous_version(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlq.Queue(db_path, lease_seconds=10, max_attempts=2).close()
    bad = migrate.Migration(
        migrate.latest_version() + 1,
        "broken",
        "CREATE TABLE sqlq_half (x INTEGER);\nINSERT INTO no_such_table VALUES (1);\n",
    )
    current = migrate.migrations()
    monkeypatch.setattr(migrate, "migrations", lambda: (*current, bad))
    with pytest.raises(sqlq.errors.StorageError):
        sqlq.Queue(db_path, lease_seconds=10, max_attempts=2)
    with sqlite3.connect(db_path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        version = conn.execute("SELECT max(version) FROM sqlq_migrations").fetchone()[0]
    conn.close()
    assert "sqlq_half" not in tables
    assert version == bad.version - 1


def test_statement_splitting_keeps_triggers_whole() -> None:
    m = migrate.Migration(
        9,
        "t",
        "CREATE TABLE a (x);\n-- a comment; with a semicolon\n"
        "CREATE TRIGGER t AFTER INSERT ON a BEGIN\n  UPDATE a SET x = 1;\n  DELETE FROM a;\nEND;\n",
    )
    statements = m.statements()
    assert len(statements) == 2
    assert "CREATE TRIGGER" in statements[1] and statements[1].endswith("END;")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_every_query_is_described_and_used(backend: str) -> None:
    """Each backend's queries.sql against the code that uses its Q: the backend's
    package, the SQL layer both backends share (sqlq/sqlstore.py, whose calls name
    their backend's statements as ``self.q.NAME``) and, for SQLite, the modules above
    it that still use its queries."""
    package = Path(sqlq.__file__).parent
    other = {"sqlite": "postgresql", "postgresql": "sqlite"}[backend]
    files = [
        p
        for p in package.rglob("*.py")
        if other not in p.relative_to(package).parts
        and (backend == "sqlite" or backend in p.relative_to(package).parts)
    ]
    code = "\n".join(p.read_text("utf-8") for p in files)
    queries = importlib.import_module(f"sqlq.{backend}.queries").Q
    used = set(re.findall(r"\bQ\.(\w+)", code)) - {"all"}
    shared = (package / "sqlstore.py").read_text("utf-8")
    used |= set(re.findall(r"\bq\.(\w+)", shared))
    assert used <= set(queries.all), f"used but not defined: {used - set(queries.all)}"
    assert set(queries.all) <= used, f"defined but never used: {set(queries.all) - used}"
    assert all(q.doc for q in queries.all.values())


def test_query_file_parser_rejects_duplicates_and_empty_blocks() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: a\n-- doc\nSELECT 1\n-- name: a\n-- doc\nSELECT 2\n")
    with pytest.raises(ValueError, match="description"):
        parse("-- name: a\nSELECT 1\n")


@pytest.mark.parametrize("kind", ["zero bytes", "a header without tables"])
def test_an_empty_file_is_a_database_not_created_yet(db_path: Path, kind: str) -> None:
    """The one rule for an empty file, as in the command line: opening it to read
    refuses it unchanged; opening a Queue creates the database in it."""
    db_path.touch()
    if kind == "a header without tables":  # what an interrupted creation leaves
        with sqlite3.connect(db_path) as conn:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.close()
    before = _digest(db_path)
    with pytest.raises(NotASqlqDatabase, match="the file is empty"):
        SqliteBackend(db_path, migrate=False)
    assert _digest(db_path) == before
    with sqlq.Queue(db_path, lease_seconds=1, max_attempts=1) as q:
        assert q.add("t")
    backend = SqliteBackend(db_path, migrate=False)
    assert backend.schema_version == migrate.latest_version()
    backend.close()


@pytest.mark.parametrize("found", ["empty", "older"])
def test_a_reader_that_outwaits_a_creation_or_migration_gets_busy(
    db_path: Path, found: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader finds the file empty (or older) while another process holds the
    migration lock: it waits busy_timeout for that creation or migration, and if
    it is still going on then, the reader gets Busy naming the lock, not a verdict
    on a file that is being written ("empty, not a sqlq database", "older")."""
    if found == "empty":
        db_path.touch()
    else:
        with monkeypatch.context() as m:
            older = migrate.migrations()[:-1]
            m.setattr(migrate, "migrations", lambda: older)
            sqlq.Queue(db_path, lease_seconds=1, max_attempts=1).close()
    lock = os.open(f"{db_path}.migrate-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the creator or migrator (its own open file)
        with pytest.raises(Busy, match=re.escape(f"{db_path}.migrate-lock")):
            SqliteBackend(db_path, migrate=False, busy_timeout=0.1)
    finally:
        os.close(lock)


def test_a_file_without_tables_but_with_a_header_field_set_is_foreign(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA user_version = 7")  # someone's marker: not sqlq's to take
    conn.close()
    _assert_refused_as_foreign_and_untouched(db_path)


def test_opening_without_migrating_never_writes(db_path: Path) -> None:
    from sqlq.errors import CannotOpen

    with pytest.raises(CannotOpen):
        SqliteBackend(db_path, migrate=False)
    assert not db_path.exists()
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA user_version = 7")  # a SQLite file with no tables
    conn.close()
    before = _digest(db_path)
    with pytest.raises(NotASqlqDatabase):
        SqliteBackend(db_path, migrate=False)
    assert _digest(db_path) == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]

    db_path.unlink()
    q = sqlq.Queue(db_path, lease_seconds=1, max_attempts=1)
    q.add("t", 0)
    q.close()
    backend = SqliteBackend(db_path, migrate=False)
    assert backend.counts() == {"default": {"AVAILABLE": 1}}
    backend.close()


def test_a_version_1_database_keeps_every_task_through_migration_2(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = migrate.migrations()[:1]
    monkeypatch.setattr(migrate, "migrations", lambda: first)
    conn = dbapi.connect(str(db_path), isolation_level=None)
    migrate.ensure_schema(str(db_path), lambda: conn, mode=0o600, timeout=5)
    conn.executemany(
        "INSERT INTO sqlq_tasks (queue, task_id, state, seq, attempts, max_attempts, lease_id,"
        " deadline, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
        [
            ("default", "avail", "AVAILABLE", 5, 1, 3, 4, None, 10),
            ("default", "held", "RESERVED", 6, 1, 3, 6, 100.0, 11),
            ("default", "done", "COMPLETED", 2, 1, 3, 2, None, 12),
            ("mail", "dead", "DEAD", 3, 2, 2, 3, None, 13),
        ],
    )
    conn.execute("UPDATE sqlq_clock SET now = 50, counter = 6")
    conn.close()
    monkeypatch.undo()

    q = sqlq.Queue(db_path, lease_seconds=10, max_attempts=3)
    assert q.status("held", 60) == "RESERVED"
    assert q.info("done").finished_at == 12
    assert q.info("avail").attempts == 1
    assert q.reserve(61) == "avail"
    assert q.status("held", 100) == "AVAILABLE"  # the old lease still runs out on time
    q.close()
    mail = sqlq.Queue(db_path, lease_seconds=10, max_attempts=3, queue="mail")
    dead = mail.dead()
    assert [(d.task_id, d.attempts, d.finished_at) for d in dead] == [("dead", 2, 13)]
    mail.close()


#: The columns of sqlq_tasks up to version 4, and a task in each state as stored then.
V4_COLUMNS = (
    "queue, task_id, state, seq, attempts, max_attempts, lease_id, deadline, run_at,"
    " payload, last_error, retry_kind, retry_base, retry_cap, created_at, updated_at,"
    " finished_at"
)
V4_ROWS = [
    ("default", "wait", "WAITING", 1, 1, 3, 1, None, 90.0, '{"k": 1}', "e", "fixed", 5.0,
     5.0, 1.0, 2.0, None),
    ("default", "avail", "AVAILABLE", 2, 0, 3, None, None, None, None, None, "immediate",
     0.0, 0.0, 1.0, 1.0, None),
    ("default", "held", "RESERVED", 3, 1, 3, 3, 100.0, None, b"raw", None, "immediate",
     0.0, 0.0, 1.0, 3.0, None),
    ("default", "done", "COMPLETED", 4, 1, 3, 4, None, None, '"x"', None, "exponential",
     1.0, 8.0, 1.0, 4.0, 4.0),
    ("mail", "dead", "DEAD", 5, 2, 2, 5, None, None, None, "boom", "immediate", 0.0, 0.0,
     1.0, 5.0, 5.0),
]  # fmt: skip


def _database_at(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, columns: str, rows: list[Any]
) -> None:
    """A database made by the migrations up to ``version``, holding ``rows`` (of
    ``columns``) and a clock at 50."""
    with monkeypatch.context() as m:
        old = migrate.migrations()[:version]
        m.setattr(migrate, "migrations", lambda: old)
        sqlq.Queue(db_path, lease_seconds=10, max_attempts=3).close()
    marks = ", ".join("?" * len(rows[0]))
    with sqlite3.connect(db_path) as conn:
        conn.executemany(f"INSERT INTO sqlq_tasks ({columns}) VALUES ({marks})", rows)
        conn.execute("UPDATE sqlq_clock SET now = 50, counter = 5")
    conn.close()


def test_a_version_4_database_keeps_every_task_through_migration_5(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks in every state, as version 4 stored them, keep every column through the
    migration that adds task names (all None), and the queue goes on with them."""
    columns, rows = V4_COLUMNS, V4_ROWS
    _database_at(db_path, monkeypatch, 4, columns, rows)
    with sqlq.Queue(db_path, lease_seconds=10, max_attempts=3) as q:
        assert q.info("held", 60).name is None
        lease = q.claim(60)
        assert lease is not None and (lease.task_id, lease.name) == ("avail", None)
    with sqlite3.connect(db_path) as conn:
        kept = conn.execute(f"SELECT {columns}, name FROM sqlq_tasks ORDER BY id").fetchall()
        version = conn.execute("SELECT max(version) FROM sqlq_migrations").fetchone()
    conn.close()
    assert version == (migrate.latest_version(),)
    claimed = ("avail", "RESERVED", 2, 1, 3, 6, 70.0, None, None, None, "immediate", 0.0, 0.0,
               1.0, 60.0, None)  # fmt: skip
    assert kept == [
        (*rows[0], None),
        ("default", *claimed, None),
        *((*row, None) for row in rows[2:]),
    ]


def test_a_version_5_database_keeps_every_task_through_migration_7(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 7 rebuilds sqlq_tasks (a new state in its CHECKs): tasks in every
    state, as version 5 stored them, keep every column (no stop requested), and the
    queue goes on with them: cancel works, the views answer, nothing is paused."""
    columns = f"{V4_COLUMNS}, name"
    rows = [(*row, name) for row, name in zip(V4_ROWS, ["n", None, "n", None, "m"], strict=True)]
    _database_at(db_path, monkeypatch, 5, columns, rows)
    with sqlq.Queue(db_path, lease_seconds=10, max_attempts=3) as q:
        assert not q.paused
        assert q.cancel("held", 60) == "STOPPING" and q.cancel("avail", 60) == "CANCELLED"
    with sqlite3.connect(db_path) as conn:
        kept = conn.execute(f"SELECT {columns}, stop_requested_at FROM sqlq_tasks ORDER BY id")
        kept = kept.fetchall()
        views = conn.execute("SELECT queue, cancelled, paused FROM sqlq_queue_stats").fetchall()
        stopping = conn.execute("SELECT task_id FROM sqlq_leases WHERE stop_requested").fetchall()
    conn.close()
    cancelled = ("default", "avail", "CANCELLED", 2, 0, 3, None, None, None, None, None,
                 "immediate", 0.0, 0.0, 1.0, 60.0, 60.0, None, None)  # fmt: skip
    assert kept == [(*rows[0], None), cancelled, (*rows[2], 60.0), *((*r, None) for r in rows[3:])]
    assert views == [("default", 1, 0), ("mail", 0, 0)] and stopping == [("held",)]


def test_a_version_9_database_keeps_its_line_through_migration_10(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 10 (priorities): the tasks in line keep their order (priority 0, line
    key 0: as if they joined at the epoch), ahead of the tasks added after it but
    for strict priorities above 0."""
    columns = "queue, task_id, state, seq, attempts, max_attempts, created_at, updated_at"
    rows = [
        ("default", "old-1", "AVAILABLE", 3, 0, 3, 1.0, 1.0),
        ("default", "old-2", "AVAILABLE", 4, 0, 3, 2.0, 2.0),
    ]
    _database_at(db_path, monkeypatch, 9, columns, rows)
    with (
        sqlq.Queue(db_path, lease_seconds=10, max_attempts=3) as q,
        sqlq.Queue(db_path, lease_seconds=10, max_attempts=3, aging=None) as strict,
    ):
        q.add("new", 60, priority=1)  # aging 60: as if it joined at 0, after the old ones
        strict.add("urgent", 60, priority=1)
        assert q.info("old-1", 60).priority == 0
        assert [q.reserve(60) for _ in range(5)] == ["urgent", "old-1", "old-2", "new", None]


def _grouped_file_at(db_path: Path, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """A file made by the migrations up to ``version`` (11 or later) with the group
    triggers applied (as its first grouped add did) and, written as that version's
    sqlq wrote them: g under a limit of 1, g1 leased (counted by the triggers), g2
    and an ungrouped task in line, the clock at 1."""
    with monkeypatch.context() as m:
        old = migrate.migrations()[:version]
        m.setattr(migrate, "migrations", lambda: old)
        sqlq.Queue(db_path, lease_seconds=100, max_attempts=3).close()
    conn = dbapi.connect(str(db_path), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        migrate.apply_on_demand(conn.cursor(), migrate.GROUP_TRIGGERS)
        conn.execute(
            "INSERT INTO sqlq_limits (queue, group_key, concurrency) VALUES ('default', 'g', 1)"
        )
        columns = "queue, task_id, state, seq, attempts, max_attempts, created_at, updated_at"
        for seq, (task_id, group) in enumerate((("g1", "g"), ("g2", "g"), ("plain", None)), 1):
            conn.execute(
                f"INSERT INTO sqlq_tasks ({columns}, line_key, group_key) "
                "VALUES ('default', ?, 'AVAILABLE', ?, 0, 3, 0, 0, 0, ?)",
                (task_id, seq, group),
            )
        conn.execute(
            "UPDATE sqlq_tasks SET state = 'RESERVED', attempts = 1, lease_id = 4, "
            "deadline = 101, updated_at = 1 WHERE task_id = 'g1'"
        )
        conn.execute("UPDATE sqlq_clock SET now = 1, counter = 4")
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_migration_13_keeps_a_grouped_files_tasks_limits_and_triggers(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 13 rebuilds sqlq_tasks, which drops the group triggers a file made
    by its first grouped add (on-demand migration 1): the runner makes them again in
    the migration's transaction.  A version 12 file with a group under a limit of 1,
    one of its tasks leased and one in line, comes out with its tasks, its counts and
    its triggers: the limit still holds, and the slot is freed by the completion."""
    _grouped_file_at(db_path, monkeypatch, 12)
    triggers = migrate.on_demand()[migrate.GROUP_TRIGGERS - 1]
    made = sorted(_norm_trigger(s) for s in triggers.statements() if "CREATE TRIGGER" in s)
    with sqlq.Queue(db_path, lease_seconds=100, max_attempts=3) as q:  # migrated
        objects, records, grouped = _schema_and_records(db_path)
        assert sorted(sql for kind, _, table, sql in objects if _on_tasks(kind, table)) == made
        assert records[0] == (-1, triggers.name, triggers.checksum) and grouped == 1
        assert records[-1][0] == migrate.latest_version() >= 13
        assert q.groups(2)["g"].running == 1
        assert q.reserve(2) == "plain"  # g2 waits: g's one slot is g1's
        assert q.reserve(2) is None
        assert q.complete("g1", 3, token=4)
        assert q.reserve(4) == "g2"  # the completion freed the slot (a trigger)
        assert [t.task_id for t in q.tasks(5, state="RESERVED")] == ["g2", "plain"]


def test_a_migration_that_keeps_the_triggers_makes_none_again(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner makes again only the triggers a numbered migration dropped: a file
    grouped at version 11 goes through migration 12 (which drops none) and 13."""
    _grouped_file_at(db_path, monkeypatch, 11)
    sqlq.Queue(db_path, lease_seconds=100, max_attempts=3).close()
    objects, _, _ = _schema_and_records(db_path)
    assert sorted(name for kind, name, table, _ in objects if _on_tasks(kind, table)) == [
        "sqlq_group_added",
        "sqlq_group_moved",
    ]


def _key_indexes(path: Path) -> tuple[list[str], list[int]]:
    """The key indexes of the file (their SQL) and the on-demand migrations it recorded."""
    objects, records, _ = _schema_and_records(path)
    made = sorted(sql for kind, name, _, sql in objects if kind == "index" and "_key_" in name)
    return made, [version for version, _, _ in records if version < 0]


def _declared_key_indexes() -> list[str]:
    keys = migrate.on_demand()[migrate.KEY_INDEXES - 1]
    return sorted(s[s.index("CREATE") :].rstrip(";") for s in keys.statements())


def test_the_key_indexes_come_with_the_first_keyed_add(db_path: Path) -> None:
    """A file whose queues use no dedupe keys has no key index (its completions and
    claims keep none); the first keyed add makes them (on-demand migration 2) and
    records it; an add whose transaction rolls back takes them away again, and the
    next keyed add makes them anew."""
    with sqlq.Queue(db_path, lease_seconds=10, max_attempts=3) as q:
        q.add("plain", 0)
        assert _key_indexes(db_path) == ([], [])
        with pytest.raises(RuntimeError), q.engine.begin() as conn:
            q.add("t", 0, key="k", conn=conn)
            raise RuntimeError("the caller's transaction rolls back")
        assert _key_indexes(db_path) == ([], [])
        with pytest.raises(RuntimeError), q.engine.begin() as conn:  # two calls, one transaction
            q.add("t", 0, key="k", conn=conn)
            q.add("t2", 0, key="k2", conn=conn)
            raise RuntimeError("the caller's transaction rolls back")
        assert _key_indexes(db_path) == ([], [])
        assert q.add("u", 0, key="k").outcome.value == "added"
        assert _key_indexes(db_path) == (_declared_key_indexes(), [-2])
        assert q.add("v", 0, key="k").holder == "u"  # the unique index guards it
    with sqlq.Queue(db_path, lease_seconds=10, max_attempts=3) as again:
        assert again.add("w", 0, key="k").holder == "u"
    assert _key_indexes(db_path) == (_declared_key_indexes(), [-2])


@pytest.mark.parametrize("keyed", [True, False])
def test_migration_13_keeps_the_key_indexes_of_a_file_that_holds_keyed_tasks(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    """Migration 13 leaves the key indexes to on-demand migration 2: a version 12 file
    that holds a keyed task gets them (and the record) in the migration, one that
    holds none is left without them."""
    columns = "queue, task_id, state, seq, attempts, max_attempts, created_at, updated_at"
    rows = [("default", "t", "AVAILABLE", 1, 0, 3, 1.0, 1.0)]
    _database_at(db_path, monkeypatch, 12, columns, rows)
    if keyed:
        with sqlite3.connect(db_path) as conn:
            conn.execute("UPDATE sqlq_tasks SET dedupe_key = 'k'")
        conn.close()
    with sqlq.Queue(db_path, lease_seconds=10, max_attempts=3) as q:
        assert _key_indexes(db_path) == ((_declared_key_indexes(), [-2]) if keyed else ([], []))
        answer = q.add("u", 60, key="k")
        assert answer.holder == ("t" if keyed else "u")
    assert _key_indexes(db_path) == (_declared_key_indexes(), [-2])


def _tasks_table_of(statements: list[str]) -> str:
    """The CREATE TABLE of sqlq_tasks in a migration's statements, made as "tasks"."""
    (made,) = [s for s in statements if s.lstrip().startswith("CREATE TABLE sqlq_tasks_new")]
    return made.replace("sqlq_tasks_new", "tasks", 1)


def test_the_one_state_check_admits_exactly_the_rows_the_ten_checks_did() -> None:
    """Migration 14 wrote migration 13's CHECKs of the state machine as one CASE on the
    state.  Every row over the columns they read (each state and a state of no
    meaning; each of deadline, token, wake-up, finish time, stop request and result
    set or not; attempts below, at and above max_attempts, and 0) is admitted by
    both tables or refused by both: 3,584 rows."""
    conn = sqlite3.connect(":memory:")
    before = _tasks_table_of(migrate.migrations()[12].statements())
    after = _tasks_table_of(migrate.migrations()[13].statements())
    conn.execute(before)
    conn.execute(after.replace("CREATE TABLE tasks", "CREATE TABLE tasks_after", 1))
    states = ["WAITING", "AVAILABLE", "RESERVED", "COMPLETED", "DEAD", "CANCELLED", "DONE"]
    optional = ["lease_id", "deadline", "run_at", "finished_at", "stop_requested_at", "result"]
    counts = [(0, 1), (1, 1), (1, 2), (2, 2), (0, 2), (3, 2), (2, 3), (-1, 2)]
    admitted, compared = 0, 0
    for state in states:
        for mask in range(2 ** len(optional)):
            values = {
                c: (5 if c != "result" else "1") if mask >> i & 1 else None
                for i, c in enumerate(optional)
            }
            for attempts, max_attempts in counts:
                row = {
                    "queue": "q",
                    "task_id": f"t{compared}",
                    "state": state,
                    "seq": 1,
                    "attempts": attempts,
                    "max_attempts": max_attempts,
                    "created_at": 0,
                    "updated_at": 0,
                    **values,
                }
                columns = ", ".join(row)
                marks = ", ".join(f":{c}" for c in row)
                outcome = []
                for table in ("tasks", "tasks_after"):
                    try:
                        conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", row)
                        outcome.append(True)
                    except sqlite3.IntegrityError as exc:
                        assert "CHECK constraint failed" in str(exc)
                        outcome.append(False)
                assert outcome[0] == outcome[1], row
                admitted += outcome[0]
                compared += 1
    assert compared == 3584 and 0 < admitted < compared  # both kinds were compared
    conn.close()


def _group_triggers(path: Path) -> list[str]:
    return sorted(
        sql for kind, _, table, sql in _schema_and_records(path)[0] if _on_tasks(kind, table)
    )


def test_group_triggers_rolled_back_with_the_callers_transaction_are_made_again(
    db_path: Path,
) -> None:
    """The first grouped add of a file makes the group triggers (on-demand migration
    1); made inside a caller's transaction (conn=) that rolls back, even by the second
    of two grouped adds, they are gone, and the queue object does not take them as
    there: its next grouped add makes them anew, and the group's limit holds."""
    with sqlq.Queue(db_path, lease_seconds=10, max_attempts=3) as q:
        q.add("plain", 0)
        with pytest.raises(RuntimeError), q.engine.begin() as conn:  # two calls, one transaction
            q.add("g1", 0, group="G", conn=conn)
            q.add("g2", 0, group="G", conn=conn)
            raise RuntimeError("the caller's transaction rolls back")
        assert _group_triggers(db_path) == []
        q.set_limit("G", concurrency=1)
        assert q.add("a", 0, group="G") and q.add("b", 0, group="G")
        assert len(_group_triggers(db_path)) > 0
        assert q.reserve(1) in ("plain", "a") and q.reserve(1) in ("plain", "a")
        assert q.reserve(1) is None  # b waits for a's slot


_USER_OBJECTS = (
    "CREATE VIEW my_report AS SELECT state, count(*) AS n FROM sqlq_tasks GROUP BY state",
    "CREATE INDEX my_names ON sqlq_tasks (name)",
    "CREATE TABLE my_audit (task_id TEXT, state TEXT)",
    "CREATE TRIGGER my_moves AFTER UPDATE OF state ON sqlq_tasks "
    "BEGIN INSERT INTO my_audit VALUES (new.task_id, new.state); END",
)


def _user_objects(path: Path) -> list[tuple[str, str]]:
    return sorted((n, k) for n, k in _objects(path) if n.startswith("my_"))


def test_a_rebuild_migration_keeps_the_users_views_triggers_and_indexes(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's own view, index and trigger on sqlq_tasks, made in the sqlite3 shell
    on a version 13 file: migration 14 rebuilds the table (a view on it would stop
    the rename; its indexes and triggers go with it), and makes them again after, in
    its transaction: they are there and work on the migrated file."""
    need(shutil.which("sqlite3"), "no sqlite3 shell on this machine")
    with monkeypatch.context() as m:
        old = migrate.migrations()[:13]
        m.setattr(migrate, "migrations", lambda: old)
        sqlq.Queue(db_path, lease_seconds=10, max_attempts=3).close()
    # two tasks as an add of that version stored them (this version's calls read the
    # schema version that migration 15 added, so they cannot run on a version 13 file)
    added = (
        "INSERT INTO sqlq_tasks (queue, task_id, state, seq, attempts, max_attempts, "
        "created_at, updated_at, line_key) VALUES ('default', 'a', 'AVAILABLE', 1, 0, 3, "
        "0, 0, 0), ('default', 'b', 'AVAILABLE', 2, 0, 3, 0, 0, 0)",
        "UPDATE sqlq_clock SET counter = 2",
    )
    shell = subprocess.run(
        ["sqlite3", str(db_path), ";\n".join((*added, *_USER_OBJECTS)) + ";"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shell.returncode == 0, shell.stderr
    before = _user_objects(db_path)
    with sqlq.Queue(db_path, lease_seconds=10, max_attempts=3) as q:  # migrated to the latest
        assert q.reserve(1) == "a"
    assert _user_objects(db_path) == before and len(before) == 4
    conn = dbapi.connect(str(db_path))
    try:
        latest = migrate.latest_version()
        assert conn.execute("SELECT max(version) FROM sqlq_migrations").fetchone()[0] == latest
        assert dict(conn.execute("SELECT state, n FROM my_report").fetchall()) == {
            "AVAILABLE": 1,
            "RESERVED": 1,
        }
        assert conn.execute("SELECT * FROM my_audit").fetchall() == [("a", "RESERVED")]
    finally:
        conn.close()


def test_a_users_object_the_rebuilt_table_no_longer_fits_stops_the_migration_by_name(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild that leaves out a column a user's view reads: the view cannot be made
    again, so the migration stops with a SchemaError naming it, and the file stays at
    the version before, the view in place."""
    sqlq.Queue(db_path, lease_seconds=10, max_attempts=3).close()
    conn = dbapi.connect(str(db_path), isolation_level=None)
    conn.execute("CREATE VIEW my_results AS SELECT task_id, result FROM sqlq_tasks")
    conn.close()
    latest = migrate.latest_version()
    narrower = migrate.Migration(
        latest + 1,
        "narrower",
        "DROP VIEW sqlq_queue_stats;\nDROP VIEW sqlq_dead_letters;\nDROP VIEW sqlq_leases;\n"
        "CREATE TABLE sqlq_tasks_new AS SELECT id, queue, task_id, state FROM sqlq_tasks;\n"
        "DROP TABLE sqlq_tasks;\nALTER TABLE sqlq_tasks_new RENAME TO sqlq_tasks;\n",
    )
    with monkeypatch.context() as m:
        newer = (*migrate.migrations(), narrower)
        m.setattr(migrate, "migrations", lambda: newer)
        m.setattr(migrate, "latest_version", lambda: latest + 1)
        with pytest.raises(SchemaError, match="view 'my_results'"):
            sqlq.Queue(db_path, lease_seconds=10, max_attempts=3)
    conn = dbapi.connect(str(db_path))
    try:
        assert conn.execute("SELECT max(version) FROM sqlq_migrations").fetchone()[0] == latest
        assert ("my_results", "view") in _objects(db_path)
    finally:
        conn.close()


def test_queue_stats_shows_its_next_times_as_utc_text_in_the_sqlite3_shell(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 16: sqlq_queue_stats gives next_deadline_utc and next_run_at_utc,
    the next lease's end and the next waiting task's time as UTC text (as
    datetime(..., 'unixepoch') writes them: the millisecond, then whole seconds),
    read here by the real sqlite3 shell; the Unix times stay in their columns, and a
    queue with none shows none.  A file made at version 15, with its tasks, gets them
    when it is opened."""
    sqlite3_shell = shutil.which("sqlite3")
    need(sqlite3_shell, "no sqlite3 shell on this machine")
    assert sqlite3_shell is not None
    at = 1_700_000_000.7
    with monkeypatch.context() as m:
        before = migrate.migrations()[:15]
        m.setattr(migrate, "migrations", lambda: before)
        m.setattr(migrate, "latest_version", lambda: 15)
        with sqlq.Queue(db_path, lease_seconds=30, max_attempts=1, clock=lambda: at) as q:
            q.add("now")
            q.add("later", delay=60.2999)  # due at ...60.9999: 22:14:21 to the millisecond
            assert q.reserve() is not None  # runs out at ...30.7: 22:13:50
        with sqlq.Queue(db_path, queue="quiet", lease_seconds=30, max_attempts=1) as quiet:
            quiet.add("idle")
    with sqlq.Queue(db_path, lease_seconds=30, max_attempts=1, clock=lambda: at):
        pass  # migrated to the current version
    query = (
        "SELECT queue, next_deadline, next_run_at, next_deadline_utc, next_run_at_utc "
        "FROM sqlq_queue_stats ORDER BY queue"
    )
    shown = subprocess.run(
        [sqlite3_shell, "-readonly", "-json", str(db_path), query],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    assert json.loads(shown) == [
        {
            "queue": "default",
            "next_deadline": 1_700_000_030.7,
            "next_run_at": 1_700_000_060.9999,
            "next_deadline_utc": "2023-11-14 22:13:50",
            "next_run_at_utc": "2023-11-14 22:14:21",
        },
        {
            "queue": "quiet",
            "next_deadline": None,
            "next_run_at": None,
            "next_deadline_utc": None,
            "next_run_at_utc": None,
        },
    ]
