-- 0004: the file says in its header that it is a sqlq database.
--
-- PRAGMA application_id (bytes 68-71 of the header) becomes 1936813169, "sqlq"
-- in ASCII (sqlq/sqlite/migrate.py: APPLICATION_ID), so that sqlq recognises its
-- own files by more than a table name: a foreign file that happens to have a
-- table called sqlq_migrations is refused, not migrated.  Files made before this
-- migration are recognised by their sqlq_migrations rows, which must be exactly
-- sqlq's own (version, name and checksum of migrations 1 to 3).
--
-- The pragma is written in the migration's transaction, so the id and the
-- version that records it are committed together.

PRAGMA application_id = 1936813169;
