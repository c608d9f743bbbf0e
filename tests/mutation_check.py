"""Mutation check: break the queue on purpose, one way at a time, and see the tests notice.

    .venv/bin/python tests/mutation_check.py               # every mutant
    .venv/bin/python tests/mutation_check.py --only 'sql-*' --only memory-no-high-water-mark
    .venv/bin/python tests/mutation_check.py --list
    .venv/bin/python tests/mutation_check.py --sample 30      # CI (.ci/run): this commit's share

Each mutant is a file, a piece of its text that must occur exactly once, and
what to put instead.  For each one the script edits the file, runs the test
files that should catch the change (``pytest -x``, with a time limit), and puts
the file back byte for byte, also after Ctrl-C or SIGTERM.  It prints a table
and exits non-zero if a mutant survived or its run broke.  A mutant whose
original text is no longer found exactly once stops the script before anything
is changed: a refactor must re-point it, not retire it silently.

``--sample K`` runs about K mutants, this commit's share: the mutants, in the order of
the SHA-256 of their names (fixed, whatever the order of the list), are dealt into
``ceil(N / K)`` slices (slice i: the i-th, the i+S-th, ... mutant), and the commit whose
history has ``c`` commits (``git rev-list --count HEAD``) runs slice ``c mod S``.  So
every S consecutive commits of a branch run every mutant once, and a mutant that
survives fails CI at most S commits after the change that let it live.  A shallow clone
(no history to count) takes the slice from the commit's hash instead.

Not collected by pytest (the name does not start with ``test_``).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 900  # seconds per mutant

#: The test files that check the queue's behaviour (fast ones first: -x stops early).
CORE = (
    "tests/test_contract.py",
    "tests/test_features.py",
    "tests/test_sqlite.py",
    "tests/test_invariants.py",
    "tests/test_transactional.py",
    "tests/test_stateful.py",
)
WORKER = ("tests/test_worker.py",)
CONTROL = ("tests/test_control.py", *CORE)
ASYNC = ("tests/test_async.py",)
POSTGRESQL = ("tests/test_postgresql.py", *CORE)
SCHEDULES = ("tests/test_schedules.py",)
RESULTS = ("tests/test_results.py", "tests/test_stateful.py")
LIMITS = ("tests/test_limits.py", "tests/test_stateful.py")
KEYS = ("tests/test_keys.py", "tests/test_stateful.py")
PRIORITIES = ("tests/test_priorities.py", "tests/test_stateful.py")
#: Every face on one history of combined features (the rules' drift between backends).
COMBINED = ("tests/test_combined_features.py",)
REGISTRY = ("tests/test_registry.py",)
PACKAGING = ("tests/test_packaging.py",)
IMPORTS = ("tests/test_imports.py",)
TASKS = ("tests/test_tasks.py",)
DJANGO = ("tests/test_django.py",)
HARDENING = ("tests/test_worker_hardening.py",)
LEFTOVERS = ("tests/test_worker_leftovers.py",)
SETTINGS = ("tests/test_settings.py",)
UPGRADES = ("tests/test_upgrades.py",)
CLI = ("tests/test_cli.py",)
WEB = ("tests/test_web_probe.py", "tests/test_web.py")
DOCS_SITE = "tests/test_docs_site.py::"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository
    original: str
    replacement: str
    tests: tuple[str, ...] = CORE


MUTANTS = [
    Mutant(
        "registry-never-pruned",
        "sqlq/sqlite/queries.sql",
        "DELETE FROM sqlq_workers WHERE stale_at < :before",
        "DELETE FROM sqlq_workers WHERE stale_at < :before AND 0",
        REGISTRY,
    ),
    Mutant(
        "pg-registry-never-pruned",
        "sqlq/postgresql/queries.sql",
        "DELETE FROM sqlq_workers WHERE stale_at < %(before)s",
        "DELETE FROM sqlq_workers WHERE stale_at < %(before)s AND false",
        REGISTRY,
    ),
    Mutant(
        "registry-start-moves-with-each-beat",
        "sqlq/sqlite/queries.sql",
        "    concurrency = excluded.concurrency, beat_at = excluded.beat_at,",
        "    concurrency = excluded.concurrency, beat_at = excluded.beat_at, "
        "started_at = excluded.started_at,",
        REGISTRY,
    ),
    Mutant(
        "registry-never-stale",
        "sqlq/registry.py",
        "stale = now >= row.stale_at",
        "stale = False",
        REGISTRY,
    ),
    Mutant(
        "worker-row-holds-nothing",
        "sqlq/worker/monitor.py",
        "if e.state in HELD and not e.lost",
        "if False",
        REGISTRY,
    ),
    Mutant(
        "worker-row-left-at-a-clean-stop",
        "sqlq/worker/lifecycle.py",
        "self._forget()  # (its wait",
        "None  # (its wait",
        REGISTRY,
    ),
    # --- what happens to a task, and whose policy decides it
    Mutant(
        "durable-retry-of-the-queue-object",
        "sqlq/durable/engine.py",
        "task.max_attempts, task.retry, self._rng, at)",
        "task.max_attempts, self.retry, self._rng, at)",
    ),
    Mutant(
        "durable-max-attempts-of-the-queue-object",
        "sqlq/durable/engine.py",
        "task.max_attempts, task.retry, self._rng, at)",
        "self.max_attempts, task.retry, self._rng, at)",
    ),
    Mutant(
        "memory-max-attempts-of-the-queue-object",
        "sqlq/memory/engine.py",
        "if attempts >= record[_MAX_ATTEMPTS]:",
        "if attempts >= self.max_attempts:",
    ),
    Mutant(
        "durable-fail-without-retry-retries",
        "sqlq/durable/leasing.py",
        "        if not retry and task.stop_requested_at is None:\n"
        "            _kill(tx, task, text)",
        "        if False:\n            _kill(tx, task, text)",
    ),
    Mutant(
        "worker-retries-a-task-it-cannot-run",
        "sqlq/tasks.py",
        "return error_message(error), False",
        "return error_message(error), True",
        ("tests/test_tasks.py",),
    ),
    Mutant(
        "max-attempts-off-by-one",
        "sqlq/rules.py",
        "    if attempts >= max_attempts:\n        return _DEAD",
        "    if attempts > max_attempts:\n        return _DEAD",
    ),
    Mutant(
        "retry-exponent-off-by-one",
        "sqlq/retry.py",
        "exponent = min(attempts - 1, 1100)",
        "exponent = min(attempts, 1100)",
    ),
    Mutant(
        "retry-fixed-delay-ignored",
        "sqlq/retry.py",
        'if self.kind == "fixed":\n            return self.base',
        'if self.kind == "fixed":\n            return 0',
    ),
    Mutant(
        "durable-release-counts-the-attempt",
        "sqlq/durable/leasing.py",
        "delta = -1 if state is State.AVAILABLE else 0",
        "delta = 0",
    ),
    Mutant(
        "durable-finished-backoff-not-woken",
        "sqlq/durable/engine.py",
        "if run_at is not None and run_at <= tx.now:",
        "if False:",
    ),
    Mutant(
        "durable-purge-cutoff-ahead",
        "sqlq/durable/maintenance.py",
        "cutoff = tx.now - age",
        "cutoff = tx.now + age",
    ),
    Mutant(
        "durable-extend-ignores-seconds",
        "sqlq/durable/leasing.py",
        "stop = tx.extend(self.queue, task_id, token, length)",
        "stop = tx.extend(self.queue, task_id, token, self.lease_seconds)",
    ),
    # --- tokens
    Mutant(
        "durable-fail-ignores-the-token",
        "sqlq/durable/leasing.py",
        "        task = tx.lease(self.queue, task_id, token)\n        if task is None:\n"
        "            return None",
        "        task = tx.lease(self.queue, task_id, None)\n        if task is None:\n"
        "            return None",
    ),
    Mutant(
        "sqlite-lease-ignores-the-token",
        "sqlq/sqlite/transaction.py",
        "        if token is not None and task.token != token:\n            return None\n"
        "        return task if",
        "        return task if",
    ),
    Mutant(
        "durable-release-ignores-the-token",
        "sqlq/durable/leasing.py",
        "            task = tx.lease(self.queue, task_id, token)\n            if task is None:\n"
        "                return False",
        "            task = tx.lease(self.queue, task_id, None)\n            if task is None:\n"
        "                return False",
    ),
    Mutant(
        "durable-retried-complete-answers-false",
        "sqlq/durable/leasing.py",
        "return token is not None and self._completed_by(tx, task_id, token)",
        "return False",
    ),
    Mutant(
        "sqlite-claim-reuses-a-token",
        "sqlq/sqlite/transaction.py",
        'AVAILABLE, then not taken")\n        self._counter = token\n',
        'AVAILABLE, then not taken")\n',
    ),
    # --- compare-and-set guards
    Mutant(
        "sql-end-lease-without-compare-and-set",
        "sqlq/sqlite/queries.sql",
        "WHERE id = :id AND state = 'RESERVED' AND lease_id = :token",
        "WHERE id = :id",
    ),
    Mutant(
        "sql-wake-without-compare-and-set",
        "sqlq/sqlite/queries.sql",
        "WHERE id = :id AND state = 'WAITING' AND seq = :order",
        "WHERE id = :id AND state = 'WAITING'",
    ),
    Mutant(
        "sql-add-stores-no-name-as-empty",
        "sqlq/sqlite/queries.sql",
        "        ?11, ?11, nullif(?12, ''), ?13, ?14, ?11 - ?13 * ?14, nullif(?15, ''))",
        "        ?11, ?11, ?12, ?13, ?14, ?11 - ?13 * ?14, nullif(?15, ''))",
    ),
    Mutant(
        "sql-complete-stores-no-result-as-empty",
        "sqlq/sqlite/queries.sql",
        "    result = nullif(?5, '')",
        "    result = ?5",
        RESULTS,
    ),
    Mutant(
        "sql-complete-ignores-the-token",
        "sqlq/sqlite/queries.sql",
        "updated_at = ?4\nWHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED'"
        " AND (?3 = 0 OR lease_id = ?3)",
        "updated_at = ?4\nWHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED'",
    ),
    Mutant(
        "sql-complete-with-result-ignores-the-token",
        "sqlq/sqlite/queries.sql",
        "nullif(?5, '')\nWHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED'"
        " AND (?3 = 0 OR lease_id = ?3)",
        "nullif(?5, '')\nWHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED'",
        RESULTS,
    ),
    Mutant(
        "sql-complete-ignores-the-state",
        "sqlq/sqlite/queries.sql",
        "updated_at = ?4\nWHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED' AND (?3",
        "updated_at = ?4\nWHERE queue = ?1 AND task_id = ?2 AND (?3",
    ),
    Mutant(  # add_many's one INSERT kept though some id in the batch was not new
        "sqlite-add-many-keeps-a-partial-batch",
        "sqlq/sqlite/transaction.py",
        "rowcount == len(batch)",
        "rowcount >= 0",
    ),
    Mutant(  # complete_many runs complete_task (above); it trusts a full count alone
        "durable-complete-many-trusts-any-count",
        "sqlq/durable/leasing.py",
        "tx.complete_many(self.queue, items) == len(items)",
        "tx.complete_many(self.queue, items) >= 0",
    ),
    Mutant(
        "sql-extend-ignores-the-token",
        "sqlq/sqlite/queries.sql",
        "WHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED' AND lease_id = ?3\n",
        "WHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED'\n",
    ),
    Mutant(
        "sqlite-heartbeat-never-sees-a-stop",
        "sqlq/sqlite/transaction.py",
        "        return bool(cur.execute(Q.stop_asked, (queue, task_id)).fetchone()[0])\n",
        "        return False\n",
        CONTROL,
    ),
    Mutant(
        "sql-clock-write-without-guard",
        "sqlq/sqlite/queries.sql",
        "WHERE id = 1 AND now <= ?1 AND counter <= ?2",
        "WHERE id = 1",
    ),
    # --- time and the order of due events
    Mutant(
        "sql-wake-ups-before-expiries",
        "sqlq/sqlite/queries.sql",
        "the first two columns of due_events.\n1, 2\n",
        "the first two columns of due_events.\n5 DESC, 1, 2\n",  # WAITING after RESERVED
    ),
    Mutant(
        "sql-wake-ups-before-expiries-at-equal-times",
        "sqlq/sqlite/queries.sql",
        "the first two columns of due_events.\n1, 2\n",
        "the first two columns of due_events.\n1, 5 DESC, 2\n",
    ),
    Mutant(
        "memory-wake-ups-before-expiries-at-equal-times",
        "sqlq/memory/engine.py",
        "            if other < first:\n",
        "            if other[0] <= first[0]:\n",
    ),
    Mutant(
        "sql-deadline-exclusive",
        "sqlq/sqlite/queries.sql",
        "deadline <= max(?2, sqlq_clock.now))\n        OR EXISTS (SELECT 1 FROM sqlq_tasks\n"
        "                   WHERE queue = ?1 AND run_at <= max(?2, sqlq_clock.now)))\n"
        "       + iif(grouped",
        "deadline < max(?2, sqlq_clock.now))\n        OR EXISTS (SELECT 1 FROM sqlq_tasks\n"
        "                   WHERE queue = ?1 AND run_at <= max(?2, sqlq_clock.now)))\n"
        "       + iif(grouped",
    ),
    Mutant(  # the open of a call that claims nothing (an add, a completion)
        "sql-plain-call-deadline-exclusive",
        "sqlq/sqlite/queries.sql",
        "deadline <= max(?2, sqlq_clock.now))\n        OR EXISTS (SELECT 1 FROM sqlq_tasks\n"
        "                   WHERE queue = ?1 AND run_at <= max(?2, sqlq_clock.now)))\n"
        "       + 8 * (schema_version",
        "deadline < max(?2, sqlq_clock.now))\n        OR EXISTS (SELECT 1 FROM sqlq_tasks\n"
        "                   WHERE queue = ?1 AND run_at <= max(?2, sqlq_clock.now)))\n"
        "       + 8 * (schema_version",
    ),
    Mutant(
        "sql-due-events-deadline-exclusive",
        "sqlq/sqlite/queries.sql",
        "WHERE queue = ?1 AND deadline <= ?2\n",
        "WHERE queue = ?1 AND deadline < ?2\n",
    ),
    Mutant(
        "sqlite-no-high-water-mark",
        "sqlq/sqlite/transaction.py",
        "                if asked < mark:\n                    self.now = mark\n",
        "",
    ),
    Mutant(
        "memory-no-high-water-mark",
        "sqlq/memory/engine.py",
        "        if now < self._now:\n            now = self._now\n        self._now = now",
        "        self._now = now",
    ),
    # --- add's path for no option or a payload alone (**options: see Queue.add)
    Mutant(
        "durable-add-fast-path-drops-options",
        "sqlq/durable/adding.py",
        "        if options:\n            return self._add(",
        "        if False:\n            return self._add(",
    ),
    Mutant(
        "durable-add-fast-path-drops-payload",
        "sqlq/durable/adding.py",
        "encoded = None if payload is None else payloads.encode(payload, self.max_payload_bytes)",
        "encoded = None",
    ),
    Mutant(
        "durable-add-fast-path-drops-name",
        "sqlq/durable/adding.py",
        "                self.queue, task_id, limit, policy, encoded, waiting, name,\n"
        "                priority=NO_PRIORITY,",
        "                self.queue, task_id, limit, policy, encoded, waiting, None,\n"
        "                priority=NO_PRIORITY,",
    ),
    Mutant(
        "durable-add-fast-path-drops-now",
        "sqlq/durable/adding.py",
        "with self._call(now, conn, True) as tx:  # (one_write",
        "with self._call(None, conn, True) as tx:  # (one_write",
    ),
    Mutant(
        "memory-add-fast-path-drops-options",
        "sqlq/memory/adding.py",
        'if len(options) != 1 or "payload" not in options:',
        'if "payload" not in options:',
    ),
    # --- the line, dead letters, purge, payloads
    Mutant(
        "sql-claim-takes-the-back-of-the-line",
        "sqlq/sqlite/queries.sql",
        "WHERE queue = ?1 AND state = 'AVAILABLE' AND group_key IS NULL\n"
        "ORDER BY line_key, seq LIMIT 1",
        "WHERE queue = ?1 AND state = 'AVAILABLE' AND group_key IS NULL\n"
        "ORDER BY line_key DESC, seq DESC LIMIT 1",
    ),
    Mutant(
        "sql-claim-many-takes-the-back-of-the-line",
        "sqlq/sqlite/queries.sql",
        "IS NULL\nORDER BY line_key, seq LIMIT +?2",
        "IS NULL\nORDER BY line_key DESC, seq DESC LIMIT +?2",
    ),
    Mutant(  # claim_many's tokens: the line's order, one each, from the counter on
        "sql-claim-many-tokens-out-of-line",
        "sqlq/sqlite/queries.sql",
        "SELECT id, row_number() OVER (ORDER BY line_key, seq) AS rank",
        "SELECT id, row_number() OVER (ORDER BY line_key DESC, seq DESC) AS rank",
    ),
    Mutant(  # the DB-API module's default cache: hot statements prepared again
        "sqlite-statement-cache-default",
        "sqlq/sqlite/connections.py",
        '"cached_statements": STATEMENT_CACHE,',
        '"cached_statements": 100,',
    ),
    Mutant(
        "sql-redrive-keeps-attempts",
        "sqlq/sqlite/queries.sql",
        "SET state = 'AVAILABLE', attempts = 0, seq = :seq",
        "SET state = 'AVAILABLE', seq = :seq",
    ),
    Mutant(
        "sql-dead-letters-in-the-order-added",
        "sqlq/sqlite/queries.sql",
        "ORDER BY finished_at, id\n",
        "ORDER BY id\n",
    ),
    Mutant(
        "sql-purge-cutoff-exclusive",
        "sqlq/sqlite/queries.sql",
        "AND finished_at <= :cutoff",
        "AND finished_at < :cutoff",
    ),
    Mutant(
        "payload-json-not-decoded",
        "sqlq/payload.py",
        "        value = json.loads(stored)",
        "        value = stored",
    ),
    # --- the worker
    Mutant(
        "worker-fails-without-its-token",
        "sqlq/durable/leasing.py",
        "self._fail(tx, *item) for item in fail_items",
        "self._fail(tx, i, None, x, r) for i, _, x, r in fail_items",
        WORKER,
    ),
    Mutant(
        "worker-idle-wait-not-capped",
        "sqlq/worker/claims.py",
        "idle = min(idle * 2, self.poll_max)",
        "idle = idle * 2",
        WORKER,
    ),
    Mutant(
        "worker-heartbeats-continuously",
        "sqlq/worker/monitor.py",
        "entry.next_beat = started + w.heartbeat",
        "entry.next_beat = started",
        WORKER,
    ),
    Mutant(
        "monitor-not-woken-for-a-new-task",
        "sqlq/worker/monitor.py",
        "if due < self._wake_at:",
        "if due > self._wake_at:",
        WORKER,
    ),
    Mutant(
        "worker-reports-one-outcome-per-commit",
        "sqlq/worker/claims.py",
        "batch = self._outcomes[:MAX_BATCH]",
        "batch = self._outcomes[:1]",
        WORKER,
    ),
    Mutant(
        "worker-prefetch-bound-off-by-one",
        "sqlq/worker/batches.py",
        "return max(0, free + ahead - (self._held - self._overdue - reporting))",
        "return max(0, free + 1 + ahead - (self._held - self._overdue - reporting))",
        WORKER,
    ),
    Mutant(
        "worker-prefetches-before-a-handler-returned",
        "sqlq/worker/batches.py",
        "        if mean is None:\n            ahead = 0",
        "        if mean is None:\n            ahead = self.prefetch",
        WORKER,
    ),
    Mutant(
        "worker-prefetch-ignores-durations",
        "sqlq/worker/batches.py",
        "elif mean * self.prefetch <= free * PREFETCH_HORIZON:",
        "elif True:",
        WORKER,
    ),
    Mutant(
        "worker-prefetched-lease-not-extended",
        "sqlq/worker/jobs.py",
        "BEATING = (Phase.QUEUED, Phase.RUNNING)",
        "BEATING = (Phase.RUNNING,)",
        WORKER,
    ),
    Mutant(
        "worker-runs-a-prefetched-lease-found-lost",
        "sqlq/worker/claims.py",
        "if entry.lost:  # its lease was lost while it waited: not run",
        "if False:  # its lease was lost while it waited: not run",
        WORKER,
    ),
    Mutant(
        "worker-prefetched-leases-kept-at-stop",
        "sqlq/worker/shutdown.py",
        "queued = list(self._backlog)",
        "queued = []",
        WORKER,
    ),
    Mutant(
        "worker-first-heartbeat-after-the-claim-returned",
        "sqlq/worker/claims.py",
        "beat = asked + self.heartbeat",
        "beat = now + self.heartbeat",
        ("tests/test_worker.py::test_a_lease_s_first_heartbeat_counts_from_before_its_claim",),
    ),
    Mutant(
        "worker-outcome-waits-for-its-whole-batch",
        "sqlq/worker/batches.py",
        "return (self.clock.monotonic() if now is None else now) >= since + REPORT_WAIT",
        "return False",
        WORKER,
    ),
    Mutant(
        "executor-drops-coroutines",
        "sqlq/worker/executors.py",
        "if result is not None and _awaitable(result):",
        "if False:",
        ASYNC,
    ),
    Mutant(
        "worker-time-limit-leaves-coroutines-running",
        "sqlq/worker/outcomes.py",
        "self._executor.cancel(entry)  # once failed",
        "None  # once failed",
        ASYNC,
    ),
    # --- the PostgreSQL backend: the guards that concurrency relies on
    Mutant(
        "pg-complete-of-a-lease-that-ran-out",
        "sqlq/postgresql/queries.sql",
        "lease_id = %(token)s::bigint)\n      AND deadline > call.now\n",
        "lease_id = %(token)s::bigint)\n",
        POSTGRESQL,
    ),
    Mutant(
        "pg-fail-of-a-lease-that-ran-out",
        "sqlq/postgresql/queries.sql",
        "  AND deadline > %(now)s::float8\nFOR UPDATE\n",
        "FOR UPDATE\n",
        POSTGRESQL,
    ),
    Mutant(
        "pg-claim-waits-for-a-held-row",
        "sqlq/postgresql/queries.sql",
        "ORDER BY line_key, seq LIMIT 1\n                FOR UPDATE SKIP LOCKED)",
        "ORDER BY line_key, seq LIMIT 1\n                FOR UPDATE)",
        POSTGRESQL,
    ),
    Mutant(
        "pg-strict-mode-takes-no-turn",
        "sqlq/postgresql/transaction.py",
        "        if self._backend.strict:\n            cur.execute(Q.lock_queue",
        "        if False:\n            cur.execute(Q.lock_queue",
        POSTGRESQL,
    ),
    Mutant(
        "sqlstore-error-stored-as-given",
        "sqlq/sqlstore.py",
        '"error": self.stored_or_none(error),',
        '"error": error,',
        ("tests/test_postgresql_probe.py", "tests/test_postgresql.py"),
    ),
    Mutant(
        "sqlstore-end-lease-forgets-when-it-finished",
        "sqlq/sqlstore.py",
        '"finished_at": at if state in FINISHED else None,',
        '"finished_at": None,',
    ),
    Mutant(  # the port's one insert: with a key, the keyed statement
        "sqlstore-insert-drops-the-key",
        "sqlq/sqlstore.py",
        "        if key is None:\n            return self._add(how, task_id, payload, name)",
        "        if True:\n            return self._add(how, task_id, payload, name)",
        KEYS,
    ),
    Mutant(  # Queue's TaskInfo, made from the row's own fields
        "durable-info-forgets-the-key",
        "sqlq/durable/inspection.py",
        'fields["key"] = fields.pop("dedupe_key")',
        'fields["key"] = fields.pop("dedupe_key") and None',
        KEYS,
    ),
    Mutant(  # wait_for_result, written once for both faces
        "results-wait-never-looks",
        "sqlq/results.py",
        "return wait(ResultWait(task_id, timeout, poll, clock), self._outcome, sleep)",
        "return wait(ResultWait(task_id, timeout, poll, clock), lambda t: None, sleep)",
        RESULTS,
    ),
    Mutant(
        "pg-retries-announced-to-nobody",
        "sqlq/postgresql/transaction.py",
        "        if self._announce:",
        "        if False:",
        POSTGRESQL,
    ),
    Mutant(
        "pg-adds-announced-to-nobody",
        "sqlq/postgresql/queries.sql",
        "       (SELECT count(pg_notify(%(channel)s, '')) FILTER",
        "       (SELECT count(NULL::text) FILTER",
        POSTGRESQL,
    ),
    Mutant(
        "pg-writes-go-ahead-of-due-events",
        "sqlq/postgresql/queries.sql",
        "OR (%(asked)s::float8 IS NULL AND NOT t.due\n",
        "OR (%(asked)s::float8 IS NULL\n",
        POSTGRESQL,
    ),
    Mutant(
        "pg-writes-sent-on-a-closing-connection",
        "sqlq/postgresql/calls.py",
        "        if self._poller.poll(0):\n",
        "        if False:\n",
        ("tests/test_postgresql_faults.py",),
    ),
    # --- periodic tasks: the schedule's state moves by compare-and-set only
    Mutant(
        "schedule-state-moved-from-a-stale-read",
        "sqlq/sqlite/queries.sql",
        "WHERE queue = :queue AND name = :name AND handled_until = :seen",
        "WHERE queue = :queue AND name = :name",
        SCHEDULES,
    ),
    Mutant(
        "pg-schedule-state-moved-from-a-stale-read",
        "sqlq/postgresql/queries.sql",
        "WHERE queue = %(queue)s AND name = %(name)s AND handled_until = %(seen)s",
        "WHERE queue = %(queue)s AND name = %(name)s",
        SCHEDULES,
    ),
    # --- cancel and pause
    Mutant(
        "sql-claim-ignores-the-pause",
        "sqlq/sqlite/transaction.py",
        "            self._flags()\n        if self.paused:\n            return None\n",
        "            self._flags()\n        if False:\n            return None\n",
        CONTROL,
    ),
    Mutant(
        "sql-claim-many-ignores-the-pause",
        "sqlq/sqlite/transaction.py",
        "        if self.paused:\n            return []\n",
        "",
        CONTROL,
    ),
    Mutant(
        "sql-pause-probed-only-in-a-file-never-paused",
        "sqlq/sqlite/queries.sql",
        "WHERE queue = ?1 AND live > 0), 0)\n"
        "       + iif(paused, 4 * EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = ?1), 0)\n"
        "       + 8 * (schema_version <> ?3)\n"
        "FROM sqlq_clock WHERE id = 1\n\n-- name: open_plain_call",
        "WHERE queue = ?1 AND live > 0), 0)\n"
        "       + iif(NOT paused, 4 * EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = ?1), 0)\n"
        "       + 8 * (schema_version <> ?3)\n"
        "FROM sqlq_clock WHERE id = 1\n\n-- name: open_plain_call",
        CONTROL,
    ),
    Mutant(
        "sql-resuming-one-queue-unmarks-the-file",
        "migrations/sqlite/0013_leaner_tasks.sql",
        "    UPDATE sqlq_clock SET paused = EXISTS (SELECT 1 FROM sqlq_paused) WHERE id = 1;",
        "    UPDATE sqlq_clock SET paused = 0 WHERE id = 1;",
        ("tests/test_sqlite.py",),
    ),
    Mutant(  # the number read as a Julian day: a date thousands of years away
        "sql-stats-utc-not-from-unix-time",
        "migrations/sqlite/0016_readable_stats_times.sql",
        "       datetime(min(run_at), 'unixepoch')   AS next_run_at_utc",
        "       datetime(min(run_at))                AS next_run_at_utc",
        ("tests/test_schema.py",),
    ),
    Mutant(  # whole seconds without the millisecond first: not SQLite's text
        "pg-stats-utc-not-rounded-as-sqlite",
        "migrations/postgresql/0012_readable_stats_times.sql",
        "       to_char(to_timestamp(round(min(run_at)::numeric, 3)::double precision)",
        "       to_char(to_timestamp(floor(min(run_at)))",
        ("tests/test_postgresql.py",),
    ),
    Mutant(
        "sqlite-rebuild-drops-the-users-objects",
        "sqlq/sqlite/migrate.py",
        "        kept = _set_aside_user_objects(conn, statements)\n",
        "        kept: list[tuple[str, str, str]] = []\n",
        ("tests/test_schema.py",),
    ),
    Mutant(
        "sql-key-indexes-taken-as-made-by-a-call-that-rolls-back",
        "sqlq/sqlite/transaction.py",
        "            backend.keyed = there and self._external is None\n",
        "            backend.keyed = there\n",
        ("tests/test_schema.py",),
    ),
    Mutant(
        "sql-migration-13-drops-the-key-indexes-of-a-keyed-file",
        "sqlq/sqlite/migrate.py",
        "        if version == since and conn.execute(in_use).fetchone()[0]:",
        "        if False:",
        ("tests/test_schema.py",),
    ),
    Mutant(
        "sql-keyed-add-without-its-indexes",
        "sqlq/sqlite/transaction.py",
        "        self._keying()\n        row = self._cur.execute(Q.key_holder",
        "        row = self._cur.execute(Q.key_holder",
        KEYS,
    ),
    Mutant(
        "sql-rebuild-drops-the-group-triggers",
        "sqlq/sqlite/migrate.py",
        "        _restore_on_demand(conn, migration.version)\n",
        "",
        ("tests/test_schema.py",),
    ),
    Mutant(
        "pg-claim-ignores-the-pause",
        "sqlq/postgresql/queries.sql",
        "                  AND NOT EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = %(queue)s)\n",
        "",
        ("tests/test_control.py",),
    ),
    Mutant(
        "memory-cancel-ends-a-running-task-at-once",
        "sqlq/memory/control.py",
        "            if record[_STOP] is None:\n                record[_STOP] = now\n",
        "            _finish(record, _CANCELLED, now, record[_ERROR])\n",
        CONTROL,
    ),
    # --- results and progress
    Mutant(
        "memory-progress-of-a-lease-that-ran-out",
        "sqlq/memory/leasing.py",
        "        if record is None or record[_STATE] is not _RESERVED or record[_TOKEN] != token:\n"
        "            return False\n"
        "        self._progress[task_id] = report\n",
        "        if record is None or record[_TOKEN] != token:\n"
        "            return False\n"
        "        self._progress[task_id] = report\n",
        RESULTS,
    ),
    Mutant(
        "sql-progress-of-a-lease-that-ran-out",
        "sqlq/sqlite/queries.sql",
        "WHERE lease_id = :token AND queue = :queue AND task_id = :task_id "
        "AND state = 'RESERVED'\n",
        "WHERE lease_id = :token AND queue = :queue AND task_id = :task_id\n",
        RESULTS,
    ),
    Mutant(
        "memory-retried-completion-replaces-the-result",
        "sqlq/memory/leasing.py",
        "            return token is not None and state is _COMPLETED "
        "and record[_TOKEN] == token\n",
        "            if token is not None and state is _COMPLETED and record[_TOKEN] == token:\n"
        "                self._results[task_id] = result\n"
        "                return True\n"
        "            return False\n",
        RESULTS,
    ),
    Mutant(
        "worker-drops-what-handlers-return",
        "sqlq/worker/claims.py",
        "completed = [(e.lease.task_id, e.lease.token, e.result) for",
        "completed = [(e.lease.task_id, e.lease.token, None) for",
        RESULTS,
    ),
    # --- per-key limits
    Mutant(
        "sql-group-cap-off-by-one",
        "sqlq/sqlite/queries.sql",
        "{{_group_admits}}\n                                AND tat <= ?2 AND NOT ?3",
        "head IS NOT NULL AND running <= cap\n"
        "                                AND tat <= ?2 AND NOT ?3",
        LIMITS,
    ),
    Mutant(
        "pg-group-cap-off-by-one",
        "sqlq/postgresql/queries.sql",
        "{{_group_admits}} AND tat <= call.now\n      AND NOT %(fair)s",
        "head IS NOT NULL AND running <= cap AND tat <= call.now\n      AND NOT %(fair)s",
        LIMITS,
    ),
    Mutant(
        "sql-rate-ignored",
        "sqlq/sqlite/queries.sql",
        "                                AND tat <= ?2 AND NOT ?3\n",
        "                                AND NOT ?3\n",
        LIMITS,
    ),
    Mutant(  # only a completion frees a slot: a failure or an expiry keeps it
        "sql-expiry-keeps-the-slot",
        "migrations/sqlite/on_demand/0001_group_triggers.sql",
        "running = running + (new.state = 'RESERVED') - (old.state = 'RESERVED'),",
        "running = running + (new.state = 'RESERVED')\n"
        "                  - (old.state = 'RESERVED' AND new.state = 'COMPLETED'),",
        LIMITS,
    ),
    Mutant(
        "pg-expiry-keeps-the-slot",  # (0010 made the counting function anew: its text is live)
        "migrations/postgresql/0010_group_front_under_lock.sql",
        "- (OLD.state = 'RESERVED')::int,",
        "- (OLD.state = 'RESERVED' AND NEW.state = 'COMPLETED')::int,",
        LIMITS,
    ),
    Mutant(  # calls that move grouped tasks no longer take the queue's turn first
        "pg-grouped-moves-take-no-turn",
        "sqlq/postgresql/queries.sql",
        "c.grouped AND %(serial)s::boolean",
        "false AND %(serial)s::boolean",
        (
            "tests/test_postgresql_faults.py"
            "::test_two_settles_over_two_groups_in_opposite_orders_do_not_deadlock",
        ),
    ),
    Mutant(
        "memory-ended-lease-keeps-its-slot",
        "sqlq/memory/lines.py",
        "            group.running -= 1\n",
        "",
        LIMITS,
    ),
    Mutant(
        "memory-round-robin-by-line-order",
        "sqlq/memory/layout.py",
        "return (self.turn, key, counter) if fair else (key, counter)",
        "return (0, key, counter) if fair else (key, counter)",
        LIMITS,
    ),
    # --- dedupe keys (sqlq.keys)
    Mutant(
        "memory-key-holder-ignores-reserved-tasks",
        "sqlq/memory/adding.py",
        "if finished is None or (rule.window is not None and finished > now - rule.window):",
        "if (finished is None and record[_STATE] is not _RESERVED) or (\n"
        "                rule.window is not None and finished > now - rule.window\n"
        "            ):",
        KEYS,
    ),
    Mutant(
        "postgresql-no-race-guard-for-keys",
        "migrations/postgresql/0006_dedupe_keys.sql",
        "CREATE UNIQUE INDEX sqlq_tasks_key_holder",
        "CREATE INDEX sqlq_tasks_key_holder",
        # the race of real processes in test_keys may miss it; the redrive racing a keyed
        # add (test_probe13, a held transaction) finds it every time
        ("tests/test_probe13.py", "tests/test_keys.py"),
    ),
    # --- idle groups forgotten at purge (tests/test_limits.py, on every face)
    Mutant(
        "memory-purge-forgets-a-group-whose-rate-owes-a-wait",
        "sqlq/memory/maintenance.py",
        "if name not in busy and not group.running and group.tat <= now",
        "if name not in busy and not group.running",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "memory-purge-forgets-a-group-with-a-task-in-line",
        "sqlq/memory/maintenance.py",
        "busy = {r[_GROUP] for r in self._tasks.values() if r[_STATE] not in _ENDED}",
        "busy = {r[_GROUP] for r in self._tasks.values() if r[_STATE] is _WAITING}",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "memory-purge-forgets-a-group-with-a-lease",
        "sqlq/memory/maintenance.py",
        "if name not in busy and not group.running and group.tat <= now",
        "if (name not in busy or group.running) and group.tat <= now",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "memory-redrive-leaves-a-forgotten-group-unmade",
        "sqlq/memory/maintenance.py",
        "self._make_group(record[_GROUP])  # purge forgot it",
        "pass",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "sqlite-purge-forgets-a-group-whose-rate-owes-a-wait",
        "sqlq/sqlite/queries.sql",
        "  AND live = 0 AND running = 0 AND tat <= :now",
        "  AND live = 0 AND running = 0",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "sqlite-purge-forgets-busy-groups",
        "sqlq/sqlite/queries.sql",
        "  AND live = 0 AND running = 0 AND tat <= :now",
        "  AND tat <= :now",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "sqlite-purge-looks-at-the-first-batch-of-groups-only",
        "sqlq/sqlite/transaction.py",
        "return forgotten, last if seen == batch else None",
        "return forgotten, None",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "sqlite-redrive-leaves-a-forgotten-group-unmade",
        "sqlq/sqlite/transaction.py",
        "            self._cur.execute(Q.remake_group, params)\n",
        "",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "pg-purge-forgets-a-group-whose-rate-owes-a-wait",
        "sqlq/postgresql/queries.sql",
        "      AND live = 0 AND running = 0 AND tat <= %(now)s::float8\n"
        "    ORDER BY group_key\n"
        "    FOR UPDATE SKIP LOCKED\n"
        "), gone AS (\n"
        "    DELETE FROM sqlq_groups AS g USING idle\n"
        "    WHERE g.queue = %(queue)s AND g.group_key = idle.group_key\n"
        "      AND g.live = 0 AND g.running = 0 AND g.tat <= %(now)s::float8\n",
        "      AND live = 0 AND running = 0\n"
        "    ORDER BY group_key\n"
        "    FOR UPDATE SKIP LOCKED\n"
        "), gone AS (\n"
        "    DELETE FROM sqlq_groups AS g USING idle\n"
        "    WHERE g.queue = %(queue)s AND g.group_key = idle.group_key\n",
        ("tests/test_limits.py",),
    ),
    Mutant(
        "pg-purge-waits-for-a-group-another-call-holds",
        "sqlq/postgresql/queries.sql",
        "    ORDER BY group_key\n    FOR UPDATE SKIP LOCKED\n",
        "    ORDER BY group_key\n    FOR UPDATE\n",
        ("tests/test_postgresql_faults.py",),
    ),
    Mutant(
        "pg-redrive-leaves-a-forgotten-group-unmade",
        "sqlq/postgresql/transaction.py",
        '        cur.execute(Q.remake_groups, {"ids": row_ids})\n',
        "",
        ("tests/test_postgresql_faults.py",),
    ),
    Mutant(
        "pg-redrive-makes-groups-in-the-tasks-order",
        "sqlq/postgresql/transaction.py",
        '        cur.execute(Q.remake_groups, {"ids": row_ids})\n',
        '        for one in row_ids:\n            cur.execute(Q.remake_groups, {"ids": [one]})\n',
        ("tests/test_postgresql_faults.py",),
    ),
    Mutant(
        "postgresql-group-front-read-before-its-lock",
        "migrations/postgresql/0010_group_front_under_lock.sql",
        "        PERFORM 1 FROM sqlq_groups\n"
        "        WHERE queue = NEW.queue AND group_key = NEW.group_key\n"
        "        FOR UPDATE;\n",
        "",
        ("tests/test_postgresql_faults.py",),
    ),
    Mutant(
        "sqlite-key-window-finds-the-oldest-holder",
        "sqlq/sqlite/queries.sql",
        "WHERE queue = ?1 AND dedupe_key = ?2 AND finished_at > ?3\n"
        "ORDER BY finished_at DESC, seq DESC LIMIT 1",
        "WHERE queue = ?1 AND dedupe_key = ?2 AND finished_at > ?3\n"
        "ORDER BY finished_at, seq LIMIT 1",
        KEYS,
    ),
    # --- priorities
    Mutant(  # a plain add's line key: the time it joins, as rules.line_key's at priority 0
        "sql-plain-add-joins-the-line-at-zero",
        "sqlq/sqlite/queries.sql",
        "        ?11, ?9)\nON CONFLICT",
        "        ?11, 0)\nON CONFLICT",
        PRIORITIES,
    ),
    Mutant(
        "sql-claim-ignores-priorities",
        "sqlq/sqlite/queries.sql",
        "WHERE queue = ?1 AND state = 'AVAILABLE' AND group_key IS NULL\n"
        "ORDER BY line_key, seq LIMIT 1",
        "WHERE queue = ?1 AND state = 'AVAILABLE' AND group_key IS NULL\nORDER BY seq LIMIT 1",
        PRIORITIES,
    ),
    Mutant(
        "pg-claim-many-ignores-priorities",
        "sqlq/postgresql/queries.sql",
        "    ORDER BY line_key, seq LIMIT %(n)s",
        "    ORDER BY seq LIMIT %(n)s",
        PRIORITIES,
    ),
    Mutant(
        "contract-ids-as-wide-as-4-kb",
        "sqlq/contract/states.py",
        "MAX_ID_BYTES: Final = 1024",
        "MAX_ID_BYTES: Final = 4096",
        ("tests/test_probe13.py",),
    ),
    Mutant(
        # a plain queue's add writes no place (memory.py: _SEQ); one above the counter
        # would put the tasks it lined up behind later ones at equal line keys
        "memory-plain-line-behind-later-tasks",
        "sqlq/memory/adding.py",
        "                                   0]  # fmt: skip\n",
        "                                   2**62]  # fmt: skip\n",
        PRIORITIES,
    ),
    Mutant(
        "memory-aging-sign-flipped",
        "sqlq/rules.py",
        "    return joined - priority * aging",
        "    return joined + priority * aging",
        PRIORITIES,
    ),
    Mutant(
        "sql-retry-forgets-the-priority",
        "sqlq/sqlite/queries.sql",
        "    line_key = {{_line_key}},",
        "    line_key = :now,",
        PRIORITIES,
    ),
    Mutant(
        "sql-debounce-forgets-the-priority",
        "sqlq/sqlite/queries.sql",
        "    line_key = iif(:seq = :seen, line_key, {{_line_key}}),",
        "    line_key = iif(:seq = :seen, line_key, :now),",
        PRIORITIES,
    ),
    Mutant(
        "pg-debounce-forgets-the-priority",
        "sqlq/postgresql/queries.sql",
        "ELSE {{_line_key}} END,",
        "ELSE %(now)s::float8 END,",
        PRIORITIES,
    ),
    # A statement that states the line key its own way: the property test over
    # combined features alone must notice (sqlq/rules.py; issue 26).
    Mutant(
        "sql-debounce-forgets-the-priority-combined",
        "sqlq/sqlite/queries.sql",
        "    line_key = iif(:seq = :seen, line_key, {{_line_key}}),",
        "    line_key = iif(:seq = :seen, line_key, :now),",
        COMBINED,
    ),
    Mutant(
        "pg-debounce-forgets-the-priority-combined",
        "sqlq/postgresql/queries.sql",
        "ELSE {{_line_key}} END,",
        "ELSE %(now)s::float8 END,",
        COMBINED,
    ),
    # --- dedupe keys (sqlq/keys.py: the rules both faces share)
    Mutant(
        "keys-merge-refuses",
        "sqlq/keys.py",
        '    if on_key == "merge":\n        return Keyed.MERGED',
        '    if on_key == "merge":\n        return Keyed.REFUSED',
        KEYS,
    ),
    Mutant(
        "keys-debounce-of-a-running-holder",
        "sqlq/keys.py",
        "(state == State.WAITING or state == State.AVAILABLE)",
        "(state != State.COMPLETED)",
        KEYS,
    ),
    Mutant(
        "keys-an-existing-id-is-true",
        "sqlq/keys.py",
        "return self.outcome is not Keyed.REFUSED and self.outcome is not Keyed.EXISTS",
        "return self.outcome is not Keyed.REFUSED",
        KEYS,
    ),
    Mutant(
        "keys-default-merges",
        "sqlq/keys.py",
        '        on_key = "refuse"',
        '        on_key = "merge"',
        KEYS,
    ),
    # --- schedules (sqlq/schedule.py: ticks and the catch-up policies)
    Mutant(
        "schedule-grace-exclusive",
        "sqlq/schedule.py",
        "now - latest > schedule.grace",
        "now - latest >= schedule.grace",
        SCHEDULES,
    ),
    Mutant(
        "schedule-catch-up-all-unbounded",
        "sqlq/schedule.py",
        "if tick > now or len(ticks) == MAX_CATCH_UP:",
        "if tick > now:",
        SCHEDULES,
    ),
    Mutant(
        "schedule-every-latest-tick-rounds-up",
        "sqlq/schedule.py",
        "return math.floor(until / self.every) * self.every",
        "return math.ceil(until / self.every) * self.every",
        SCHEDULES,
    ),
    Mutant(
        "schedule-tick-not-passed",
        "sqlq/schedule.py",
        "return {**self.kwargs, TICK_ARGUMENT: tick}",
        "return dict(self.kwargs)",
        SCHEDULES,
    ),
    Mutant(
        "schedule-first-seen-catches-up",
        "sqlq/schedule.py",
        "    if cursor is None:\n        return Plan([], now)",
        "    if cursor is None:\n        cursor = 0",
        SCHEDULES,
    ),
    # --- the command line (sqlq/cli/)
    Mutant(
        "cli-a-sqlq-error-exits-0",
        "sqlq/cli/__init__.py",
        "    except SqlqError as exc:\n        error(args.command, str(exc))\n"
        "        return EXIT_ERROR",
        "    except SqlqError as exc:\n        error(args.command, str(exc))\n"
        "        return EXIT_OK",
        CLI,
    ),
    Mutant(
        "cli-add-counts-existing-ids-as-added",
        "sqlq/cli/adding.py",
        '        counts["existed"] += len(results) - added',
        '        counts["added"] += len(results) - added',
        CLI,
    ),
    Mutant(
        "cli-keyed-add-says-merged-when-refused",
        "sqlq/cli/adding.py",
        'done = {Keyed.REFUSED: "not added", Keyed.MERGED: "merged into the holder"}',
        'done = {Keyed.REFUSED: "merged into the holder", Keyed.MERGED: "not added"}',
        ("tests/test_keys.py", *CLI),
    ),
    # --- the web dashboard (sqlq/web/)
    Mutant(
        "web-host-not-checked",
        "sqlq/web/security.py",
        "return client is not None and is_loopback(client.host) and "
        "is_loopback(request.url.hostname)",
        "return client is not None and is_loopback(client.host)",
        WEB,
    ),
    Mutant(
        "web-csrf-token-not-compared",
        "sqlq/web/security.py",
        "if not cookie or not hmac.compare_digest(cookie.encode(), given.encode()):",
        "if not cookie:",
        WEB,
    ),
    Mutant(
        "web-origin-not-checked",
        "sqlq/web/security.py",
        'if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":',
        "if False:",
        WEB,
    ),
    Mutant(
        "web-read-only-acts",
        "sqlq/web/app.py",
        "        if board.read_only:\n            raise HTTPException(403",
        "        if False:\n            raise HTTPException(403",
        WEB,
    ),
    Mutant(
        "sql-retry-with-a-fixed-aging",
        "sqlq/sqlite/queries.sql",
        "    line_key = {{_line_key}},",
        "    line_key = :now - priority * 60,",
        PRIORITIES,
    ),
    Mutant(
        "install-under-the-taken-name",
        "pyproject.toml",
        'name = "sqlq-queue"',
        'name = "sqlq"',
        PACKAGING,
    ),
    Mutant(
        "install-extra-names-the-other-sqlq",
        "pyproject.toml",
        '    "sqlq-queue[postgresql]",',
        '    "sqlq[postgresql]",',
        PACKAGING,
    ),
    Mutant(
        "install-hint-names-the-other-sqlq",
        "sqlq/install.py",
        "return f\"pip install '{DISTRIBUTION}[{extra}]'\"",
        "return f\"pip install 'sqlq[{extra}]'\"",
        PACKAGING,
    ),
    Mutant(
        "install-tracing-hint-by-hand",
        "sqlq/worker/tracing.py",
        "{pip_install('otel')}",
        "pip install 'sqlq[otel]'",
        PACKAGING,
    ),
    Mutant(
        "imports-sqlq-loads-every-name",
        "sqlq/__init__.py",
        "if TYPE_CHECKING:\n    from .aio import AsyncQueue\n",
        "if True:\n    from .aio import AsyncQueue\n",
        IMPORTS,
    ),
    Mutant(
        "imports-cli-loads-the-queue",
        "sqlq/cli/common.py",
        "if TYPE_CHECKING:  # SQLAlchemy and the backends load when a command opens a database\n",
        "if True:\n",
        IMPORTS,
    ),
    Mutant(
        "imports-help-loads-the-records",
        "sqlq/shapes.py",
        "if TYPE_CHECKING:\n    from .records import",
        "if True:\n    from .records import",
        IMPORTS,
    ),
    Mutant(
        "imports-backends-loads-sqlalchemy",
        "sqlq/backends.py",
        "from .errors import InvalidConfig\n",
        "import sqlalchemy as sa\n\nfrom .errors import InvalidConfig\n",
        IMPORTS,
    ),
    # What a function can be called with (sqlq/signatures.py, out of tasks.py in issue 26).
    Mutant(
        "signatures-generator-function-taken",
        "sqlq/signatures.py",
        "if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):",
        "if False:",
        TASKS,
    ),
    Mutant(
        "signatures-star-args-only-taken",
        "sqlq/signatures.py",
        "if inspect.Parameter.VAR_POSITIONAL in kinds and not kinds & _BY_KEYWORD:",
        "if False:",
        TASKS,
    ),
    Mutant(
        "signatures-handler-of-no-argument-taken",
        "sqlq/signatures.py",
        "        signature.bind(None)\n",
        "        pass\n",
        TASKS,
    ),
    Mutant(
        "tasks-defer-many-unchecked",
        "sqlq/tasks.py",
        "given.append(self.arguments(kwargs, index))",
        "given.append(dict(kwargs))",
        TASKS,
    ),
    Mutant(
        "tasks-defer-many-names-a-later-call",
        "sqlq/tasks.py",
        "self._unstorable(given, queue.max_payload_bytes)  # an earlier call's, first",
        "pass",
        TASKS,
    ),
    Mutant(
        "tasks-quick-check-forgets-the-required",
        "sqlq/tasks.py",
        "        if not self._required <= names:\n            return False\n",
        "",
        TASKS,
    ),
    Mutant(
        "tasks-quick-check-takes-any-name",
        "sqlq/tasks.py",
        "and all(type(n) is str for n in extra)",
        "",
        TASKS,
    ),
    Mutant(
        "tasks-batch-ids-not-version-4",
        "sqlq/tasks.py",
        "bytes(b & 0x0F | 0x40 for b in raw[6::16])",
        "bytes(b & 0x0F for b in raw[6::16])",
        TASKS,
    ),
    Mutant(
        "tasks-defer-many-forgets-the-tasks-priority",
        "sqlq/tasks.py",
        "priority=self.priority if priority is None else priority,\n                group=group,",
        "priority=0 if priority is None else priority,\n                group=group,",
        TASKS,
    ),
    # The command line and the dashboard (issue 23, item 12).
    # A queue's stored settings as options, declared once for sqlq add, configure and worker.
    Mutant(
        "cli-max-attempts-takes-zero",
        "sqlq/cli/common.py",
        "type=positive_int(1, MAX_ATTEMPTS)",
        "type=positive_int(0, MAX_ATTEMPTS)",
        (
            "tests/test_cli.py::test_a_stored_setting_out_of_its_range_is_a_usage_error_of_every_command",
        ),
    ),
    Mutant(
        "cli-max-attempts-unbounded",
        "sqlq/cli/common.py",
        "type=positive_int(1, MAX_ATTEMPTS)",
        "type=positive_int(1)",
        (
            "tests/test_cli.py::test_a_stored_setting_out_of_its_range_is_a_usage_error_of_every_command",
        ),
    ),
    Mutant(
        "cli-lease-takes-zero",
        "sqlq/cli/common.py",
        "type=seconds(0, MAX_LEASE_SECONDS, allow_minimum=False),",
        "type=seconds(0, MAX_LEASE_SECONDS),",
        (
            "tests/test_cli.py::test_a_stored_setting_out_of_its_range_is_a_usage_error_of_every_command",
        ),
    ),
    Mutant(
        "cli-retry-unchecked",
        "sqlq/cli/common.py",
        'parser.add_argument("--retry", metavar="POLICY", type=retry_policy,',
        'parser.add_argument("--retry", metavar="POLICY", type=str,',
        (
            "tests/test_cli.py::test_a_stored_setting_out_of_its_range_is_a_usage_error_of_every_command",
        ),
    ),
    Mutant(
        "progress-shown-in-full",
        "sqlq/humanize.py",
        'return f"{value:.{max(3, len(str(int(abs(value)))))}g}"',
        "return repr(value)",
        ("tests/test_cli.py::test_figure_rounds_what_a_handler_reported",),
    ),
    Mutant(
        "progress-cut-to-three-digits",
        "sqlq/humanize.py",
        'return f"{value:.{max(3, len(str(int(abs(value)))))}g}"',
        'return f"{value:.3g}"',
        ("tests/test_cli.py::test_progress_is_shown_to_three_significant_digits",),
    ),
    Mutant(
        "stats-next-run-at-shows-the-deadline",
        "sqlq/cli/reading.py",
        'relative(d["next_run_at"], now),',
        'relative(d["next_deadline"], now),',
        ("tests/test_cli.py::test_stats_prints_counts_per_queue_and_state",),
    ),
    Mutant(
        "leases-page-progress-unformatted",
        "sqlq/web/templates/tasks.html",
        "{{ t.progress | figure }}",
        "{{ t.progress }}",
        ("tests/test_web.py::test_progress_is_shown_to_three_significant_digits",),
    ),
    Mutant(
        "add-key-holder-unsaid",
        "sqlq/cli/adding.py",
        'print(f"key {printable(args.key)} is held by {holder}")',
        "pass",
        (
            "tests/test_keys.py::test_sqlq_add_key_answers_with_the_holder_and_show_and_list_show_keys",
        ),
    ),
    Mutant(
        "web-address-left-in-the-buffer",
        "sqlq/cli/web.py",
        'print(f"sqlq {args.command}: {db.name} on http://{where}:{port}/", flush=True)',
        'print(f"sqlq {args.command}: {db.name} on http://{where}:{port}/")',
        ("tests/test_web.py::test_sqlq_web_answers_once_it_says_where_and_exits_0_when_stopped",),
    ),
    Mutant(
        "pg-read-commands-miss-the-schema",
        "sqlq/postgresql/migrate.py",
        '_need_a_schema(cur, name)  # what migrating would say, not "migrate creates them"',
        "pass",
        ("tests/test_postgresql_probe.py::test_a_search_path_naming_no_existing_schema_says_so",),
    ),
    Mutant(
        "charts-span-their-points",
        "sqlq/web/static/charts.js",
        "scales: { x: { time: true, auto: false, range: function () { return span; } } },",
        "scales: { x: { time: true } },",
        ("tests/test_web_browser.py::test_the_charts_draw_the_throughput_and_the_oldest_wait",),
    ),
    Mutant(
        "django-running-is-ready",
        "sqlq/django/results.py",
        '    "RESERVED": TaskResultStatus.RUNNING,',
        '    "RESERVED": TaskResultStatus.READY,',
        DJANGO,
    ),
    Mutant(
        "django-dead-is-successful",
        "sqlq/django/results.py",
        '    "DEAD": TaskResultStatus.FAILED,',
        '    "DEAD": TaskResultStatus.SUCCESSFUL,',
        DJANGO,
    ),
    Mutant(
        "django-cancelled-is-ready",
        "sqlq/django/results.py",
        '    "CANCELLED": TaskResultStatus.FAILED,',
        '    "CANCELLED": TaskResultStatus.READY,',
        DJANGO,
    ),
    Mutant(
        "django-waiting-is-running",
        "sqlq/django/results.py",
        '    "WAITING": TaskResultStatus.READY,',
        '    "WAITING": TaskResultStatus.RUNNING,',
        DJANGO,
    ),
    Mutant(
        "django-enqueue-outside-the-transaction",
        "sqlq/django/backend.py",
        "        if not django_conn.in_atomic_block:",
        "        if django_conn.in_atomic_block or True:",
        DJANGO,
    ),
    Mutant(
        "django-priority-reversed",
        "sqlq/django/results.py",
        "    return int(priority)",
        "    return -int(priority)",
        DJANGO,
    ),
    Mutant(
        "worker-logs-a-handler-error-with-an-f-string",
        "sqlq/worker/outcomes.py",
        '            fields["error"] = describe_error(error)',
        '            fields["error"] = f"{type(error).__name__}: {error}"',
        HARDENING,
    ),
    Mutant(
        "describe-error-lets-a-base-exception-of-str-through",
        "sqlq/contract/error_text.py",
        '    except BaseException as failure:\n        return f"<str() raised',
        '    except Exception as failure:\n        return f"<str() raised',
        HARDENING,
    ),
    Mutant(
        "failure-asks-the-handler-errors-class",
        "sqlq/tasks.py",
        "    if issubclass(type(error), NotRetryable):",
        "    if isinstance(error, NotRetryable):",
        HARDENING,
    ),
    Mutant(
        "worker-reencodes-a-handlers-result",
        "sqlq/worker/outcomes.py",
        "            return (None if stored is None else payloads.decode(stored)), None",
        "            return result, None",
        HARDENING,
    ),
    Mutant(
        "worker-result-encoding-errors-escape",
        "sqlq/worker/outcomes.py",
        "        except BaseException as exc:\n            return None, NotRetryable(",
        "        except InvalidArgument as exc:\n            return None, NotRetryable(",
        HARDENING,
    ),
    Mutant(
        "executor-asks-a-result-its-class-unguarded",
        "sqlq/worker/executors.py",
        "        return inspect.isawaitable(result)\n    except BaseException:",
        "        return inspect.isawaitable(result)\n    except ZeroDivisionError:",
        HARDENING,
    ),
    Mutant(
        "worker-cancelled-check-asks-the-errors-class",
        "sqlq/worker/outcomes.py",
        "issubclass(type(error), asyncio.CancelledError)",
        "isinstance(error, asyncio.CancelledError)",
        HARDENING,
    ),
    Mutant(
        "forked-child-returns-into-the-worker",
        "sqlq/worker/executors.py",
        "    if os.getpid() != pid:\n",
        "    if False:\n",
        LEFTOVERS,
    ),
    Mutant(
        "executors-pid-not-read-again-in-a-forked-worker",
        "sqlq/worker/executors.py",
        "os.register_at_fork(after_in_child=_forked)",
        "None",
        LEFTOVERS,
    ),
    Mutant(
        "forked-child-of-an-async-handler-returns-into-the-loop",
        "sqlq/worker/executors.py",
        "        return exc\n    forked_child_ends(pid, 0)\n",
        "        return exc\n",
        LEFTOVERS,
    ),
    Mutant(
        "worker-cli-waits-for-lingering-threads",
        "sqlq/worker/process.py",
        "    if not lingering:\n        return\n",
        "    if True:\n        return\n",
        LEFTOVERS,
    ),
    Mutant(
        "worker-waits-for-its-poll-not-the-next-due-task",
        "sqlq/worker/wakeups.py",
        "        if not ready:\n            self._read_next_due()\n",
        "",
        ("tests/test_rate_wakeups.py",),
    ),
    Mutant(
        "sql-next-due-forgets-rate-slots",
        "sqlq/sqlite/queries.sql",
        "       (SELECT min(tat) FROM sqlq_groups INDEXED BY sqlq_groups_by_head",
        "       (SELECT NULL + min(tat) FROM sqlq_groups INDEXED BY sqlq_groups_by_head",
        ("tests/test_rate_wakeups.py",),
    ),
    Mutant(
        "pg-next-due-forgets-rate-slots",
        "sqlq/postgresql/queries.sql",
        "       (SELECT min(tat) FROM sqlq_groups\n",
        "       (SELECT NULL + min(tat) FROM sqlq_groups\n",
        ("tests/test_rate_wakeups.py",),
    ),
    Mutant(
        "next-due-ignores-a-pause",
        "sqlq/rows.py",
        "    return now, None if paused or not found else min(found)",
        "    return now, None if not found else min(found)",
        ("tests/test_rate_wakeups.py",),
    ),
    Mutant(
        "registry-stale-holds-unchecked",
        "sqlq/registry.py",
        "    if stale and find is not None:",
        "    if False:",
        REGISTRY,
    ),
    Mutant(
        "registry-any-lease-of-a-reserved-task-is-the-stale-ones",
        "sqlq/registry.py",
        "    if state == State.RESERVED and task.token == held.token:",
        "    if state == State.RESERVED:",
        REGISTRY,
    ),
    Mutant(
        "registry-a-lease-never-runs-out",
        "sqlq/registry.py",
        'what = "ran out" if ran_out else "held"',
        'what = "held"',
        REGISTRY,
    ),
    Mutant(
        "cli-workers-hides-what-is-true-now",
        "sqlq/cli/workers.py",
        """f"{': ' + held_text(h) if h.now is not None else ''})\"""",
        """")\"""",
        REGISTRY,
    ),
    Mutant(  # a queue opened without settings ignores the stored ones
        "settings-stored-not-read",
        "sqlq/durable/queue.py",
        "stored = self._backend.settings(self.queue).get(self.queue, DEFAULTS)",
        "stored = DEFAULTS",
        SETTINGS,
    ),
    Mutant(  # a setting given to a handle is lost to the stored one
        "settings-explicit-argument-ignored",
        "sqlq/durable/queue.py",
        "= merged(stored, lease, attempts, retry)",
        "= merged(stored)",
        SETTINGS,
    ),
    Mutant(  # configure stores the defaults for the settings not given
        "settings-configure-forgets-the-others",
        "sqlq/settings.py",
        '"keep_attempts": max_attempts is None,',
        '"keep_attempts": False,',
        SETTINGS,
    ),
    Mutant(  # a second configure keeps the first one's attempts
        "sql-save-settings-keeps-the-old-attempts",
        "sqlq/sqlite/queries.sql",
        "THEN sqlq_settings.max_attempts ELSE excluded.max_attempts END",
        "THEN sqlq_settings.max_attempts ELSE sqlq_settings.max_attempts END",
        SETTINGS,
    ),
    Mutant(  # PostgreSQL's configure writes back the attempts it found (a lost update)
        "sql-pg-configure-keeps-the-old-attempts",
        "sqlq/postgresql/queries.sql",
        "ELSE excluded.max_attempts END",
        "ELSE sqlq_settings.max_attempts END",
        SETTINGS,
    ),
    Mutant(  # every queue on a SQLite file imports SQLAlchemy again (issue 23 item 11)
        "sqlite-imports-sqlalchemy",
        "sqlq/sqlite/backend.py",
        "from .queries import Q\n",
        "from .queries import Q\nimport sqlalchemy  # noqa: F401, I001\n",
        IMPORTS,
    ),
    Mutant(  # `sqlq worker` without --lease takes 30 s whatever the queue stored
        "settings-worker-default-lease",
        "sqlq/worker/process.py",
        "        lease_seconds=lease_seconds,  # None: the queue's stored settings",
        "        lease_seconds=lease_seconds or 30.0,  # None: the queue's stored settings",
        SETTINGS,
    ),
    Mutant(  # a call that may claim does not notice a schema changed under it
        "upgrade-open-call-ignores-the-schema",
        "sqlq/sqlite/transaction.py",
        "                if due & 8:  # the file was migrated under this process",
        "                if due & 0:  # the file was migrated under this process",
        UPGRADES,
    ),
    Mutant(  # an add (a plain call) does not compare the schema version
        "sql-plain-call-ignores-the-schema",
        "sqlq/sqlite/queries.sql",
        "run_at <= max(?2, sqlq_clock.now)))\n       + 8 * (schema_version <> ?3)",
        "run_at <= max(?2, sqlq_clock.now)))\n       + 0 * (schema_version <> ?3)",
        UPGRADES,
    ),
    Mutant(  # SQLite: creating or migrating a file without the migration lock
        "sqlite-migration-lock-not-taken",
        "sqlq/sqlite/migrate.py",
        "        _flock_within(fd, fcntl.LOCK_EX, path, timeout)\n",
        "",
        ("tests/test_sqlite.py", "tests/faults/test_frozen.py"),
    ),
    Mutant(  # opening: the WAL size limit the connector read is not kept (the backend says 0)
        "sqlite-opening-forgets-the-wal-limit",
        "sqlq/sqlite/connections.py",
        "        self.wal_limit = self._connect.wal_limit\n",
        "",
        ("tests/faults/test_checkpoints.py",),
    ),
    Mutant(  # a refused file keeps the connection that opening it used (and -wal/-shm)
        "sqlite-refused-open-keeps-its-connection",
        "sqlq/sqlite/migrate.py",
        "        if error is not None:\n            self.close()\n",
        "        pass\n",
        ("tests/test_schema.py",),
    ),
    Mutant(  # a later migration does not stamp its version: nobody notices it
        "upgrade-later-migrations-not-stamped",
        "sqlq/sqlite/migrate.py",
        "        if migration.version >= STAMPED_SINCE:",
        "        if migration.version == STAMPED_SINCE:",
        UPGRADES,
    ),
    Mutant(  # PostgreSQL: a call that found the schema changed goes on
        "pg-call-ignores-the-schema",
        "sqlq/postgresql/transaction.py",
        "        if due is None:  # the database was migrated under this process\n"
        "            self._changed()\n        self._mark, self._now = mark, now",
        "        self._mark, self._now = mark, now",
        UPGRADES,
    ),
    Mutant(  # a migration runs under live workers of an older schema
        "upgrade-migrates-under-older-workers",
        "sqlq/sqlite/migrate.py",
        "        elif version < latest and not force:",
        "        elif False:",
        UPGRADES,
    ),
    Mutant(  # workers one schema behind do not count as older
        "sql-older-workers-off-by-one",
        "sqlq/sqlite/queries.sql",
        "WHERE schema_version < :latest\n",
        "WHERE schema_version < :latest - 1\n",
        UPGRADES,
    ),
    Mutant(  # a heartbeat that meets SchemaChanged logs it and the worker goes on
        "upgrade-heartbeat-does-not-halt",
        "sqlq/worker/monitor.py",
        "            if isinstance(exc, SchemaChanged):\n                w.halt(exc)\n"
        "            elif isinstance(exc, TRANSIENT):",
        "            if isinstance(exc, TRANSIENT):",
        UPGRADES,
    ),
    Mutant(  # an empty database argument gets the lecture about shared files again
        "no-database-not-said",
        "sqlq/sqlite/paths.py",
        "    if not path.strip():  # sqlite:/// (an empty path) too",
        "    if False:  # sqlite:/// (an empty path) too",
        ("tests/test_no_database.py",),
    ),
    Mutant(  # the registry row does not say the schema its worker knows
        "upgrade-registry-without-the-schema",
        "sqlq/registry.py",
        '"schema_version": schema_version,',
        '"schema_version": 0,',
        UPGRADES,
    ),
    Mutant(
        "django-worker-error-path-moves",
        "sqlq/django/results.py",
        'sqlq\'s last error text."""\n\n    __module__ = "sqlq.django"',
        'sqlq\'s last error text."""\n\n    __module__ = __name__',
        ("tests/test_django.py::test_what_django_documents_and_what_sqlq_cannot_run",),
    ),
    Mutant(
        "django-connections-left-open",
        "sqlq/django/worker.py",
        "        close_old_connections()\n        try:\n            return self.run(lease)\n"
        "        finally:\n            close_old_connections()\n",
        "        return self.run(lease)\n",
        (
            "tests/test_django.py::"
            "test_the_worker_closes_a_tasks_database_connection_as_after_a_request",
        ),
    ),
    Mutant(
        "django-worker-ignores-options",
        "sqlq/cli/running.py",
        "    if ignored:  # said, rather than left out without a word",
        "    if ignored and False:",
        (
            "tests/test_django.py::"
            "test_the_worker_command_takes_a_database_and_handler_or_django_settings",
        ),
    ),
    Mutant(
        "docs-cross-references-unchecked",
        "docs/conf.py",
        "nitpicky = True",
        "nitpicky = False",
        (f"{DOCS_SITE}test_a_warning_fails_the_build",),
    ),
    Mutant(
        "docs-schema-loses-a-view",
        "docs/_ext/sqlq_reference.py",
        "        for name in schema.VIEWS:",
        "        for name in schema.VIEWS[1:]:",
        (f"{DOCS_SITE}test_the_schema_and_metrics_pages_are_generated_from_the_code",),
    ),
    Mutant(
        "docs-schema-shows-a-replaced-view",
        "docs/_ext/sqlq_reference.py",
        "            views[match.group(1)] = match.group(0)",
        "            views.setdefault(match.group(1), match.group(0))",
        (f"{DOCS_SITE}test_the_schema_page_shows_the_views_a_migrated_database_has",),
    ),
    Mutant(
        "docs-calls-do-not-say-they-raise-queue-closed",
        "docs/_ext/sqlq_reference.py",
        '        found.append(("QueueClosed", "the queue was closed"))',
        "        pass",
        (f"{DOCS_SITE}test_each_call_of_a_queue_says_what_it_raises",),
    ),
    Mutant(
        "docs-reference-without-testing-helpers",
        "docs/reference/index.md",
        "\ntesting\n",
        "\n",
        (f"{DOCS_SITE}test_the_site_builds_with_warnings_as_errors",),
    ),
    # --- the batched worker's backlog (issue 24's probe, tests/test_probe_batches.py)
    Mutant(  # the leases prefetched behind a handler past its time limit stay held
        "worker-backlog-kept-behind-a-timed-out-handler",
        "sqlq/worker/monitor.py",
        "            queued = w._take_backlog() if limits or shed else []\n",
        "            queued = w._take_backlog() if shed else []\n",
        (
            "tests/test_worker.py::test_a_handler_past_its_time_limit_gives_the_backlog_behind_it_back",
            "tests/test_probe_batches.py::"
            "test_tasks_prefetched_behind_a_handler_past_its_time_limit_are_run_elsewhere",
        ),
    ),
    Mutant(  # the backlog taken after the time limit freed a coroutine's slot: its retry,
        # claimed meanwhile into the backlog, is released (an extra claim and release)
        "worker-retry-of-a-cancelled-coroutine-given-back",
        "sqlq/worker/monitor.py",
        "            queued = w._take_backlog() if limits or shed else []\n"
        "        for entry in limits:\n"
        "            w._time_out(entry)\n",
        "        for entry in limits:\n"
        "            w._time_out(entry)\n"
        "        with self._cond:\n"
        "            queued = w._take_backlog() if limits or shed else []\n",
        (
            "tests/test_async.py::"
            "test_the_retry_claimed_as_the_time_limit_frees_a_coroutine_s_slot_is_run_not_released",
        ),
    ),
    Mutant(  # a slot past its time limit counts as free: tasks are claimed to wait behind it
        "worker-prefetch-counts-a-slot-past-its-time-limit",
        "sqlq/worker/monitor.py",
        "                        w._overdue += 1\n",
        "",
        ("tests/test_worker.py::test_a_slot_past_its_time_limit_is_not_claimed_for",),
    ),
    Mutant(  # the same, in the sizing: the stuck slot is counted among the free ones
        "worker-prefetch-sized-by-a-slot-past-its-time-limit",
        "sqlq/worker/batches.py",
        "        free = self.concurrency - self._overdue\n",
        "        free = self.concurrency\n",
        ("tests/test_worker.py::test_a_slot_past_its_time_limit_is_not_claimed_for",),
    ),
    Mutant(  # a prefetched lease whose task was asked to stop is run anyway
        "worker-runs-a-prefetched-task-asked-to-stop",
        "sqlq/worker/claims.py",
        "                if entry.stop_requested:\n",
        "                if False:\n",
        ("tests/test_worker.py::test_a_prefetched_task_asked_to_stop_is_released_not_run",),
    ),
    Mutant(  # a backlog held behind a long handler is never given back
        "worker-backlog-wait-unbounded",
        "sqlq/worker/monitor.py",
        "            shed = now >= shed_at\n",
        "            shed = False\n",
        (
            "tests/test_worker.py::"
            "test_a_backlog_that_waits_too_long_goes_back_and_is_not_claimed_again",
            "tests/test_probe_batches.py::"
            "test_long_tasks_after_short_ones_are_shared_with_an_idle_worker",
        ),
    ),
    Mutant(  # the backlog given back, the prefetch still trusts the old mean: claimed again
        "worker-prefetch-not-cut-when-the-backlog-goes-back",
        "sqlq/worker/shutdown.py",
        "            self._mean = waited if mean is None else max(mean, waited)\n",
        "",
        (
            "tests/test_worker.py::"
            "test_a_backlog_that_waits_too_long_goes_back_and_is_not_claimed_again",
        ),
    ),
]


def check(mutants: list[Mutant]) -> None:
    """Every mutant's original text occurs exactly once in its file (or stop here)."""
    wrong = []
    for m in mutants:
        found = (ROOT / m.path).read_text("utf-8").count(m.original)
        if found != 1:
            wrong.append(f"  {m.name}: {m.path} has its original text {found} times, not once")
    if wrong:
        sys.exit("mutants that no longer match the code (re-point them):\n" + "\n".join(wrong))


def run(m: Mutant) -> str:
    """Apply the mutant, run its tests, restore the file: killed, survived, timeout or error."""
    path = ROOT / m.path
    original = path.read_bytes()
    text = original.decode("utf-8")
    # -n 0: one process, in the files' order (pyproject's addopts run pytest-xdist
    # workers, which put the slow tests first), so that -x stops at the first failure.
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider"),
        *m.tests,
    ]
    # A bytecode cache of its own: a cached .pyc of the original could pass for the
    # mutant (same size, same second).
    cache = tempfile.TemporaryDirectory(prefix="sqlq-mutant-")
    # SQLQ_MUTANT: the property tests stop at the first failing example, unshrunk
    # (tests/conftest.py): a mutant needs one failure, not the smallest one, and
    # shrinking a history that makes a PostgreSQL schema per example takes minutes.
    env = {**os.environ, "PYTHONPYCACHEPREFIX": cache.name, "SQLQ_MUTANT": m.name}
    try:
        path.write_text(text.replace(m.original, m.replacement, 1), "utf-8")
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, all stopped together
        )
        try:
            code = proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            return "timeout"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        path.write_bytes(original)
        cache.cleanup()
    # pytest: 0 all passed, 1 some failed; anything else is a broken run, not a verdict.
    return {0: "survived", 1: "killed"}.get(code, f"error (pytest exit {code})")


def installed_from_the_tree() -> None:
    """Refuse to run unless this Python imports sqlq from this tree in any directory:
    tests start worker processes (``python -m sqlq`` in a temporary directory), and
    with a copy installed by ``pip install .`` (as .ci/run does) they would run the
    copy, not the mutant, and a mutant they should kill would survive."""
    found = subprocess.run(
        [sys.executable, "-c", "import sqlq; print(sqlq.__file__)"],
        cwd=tempfile.gettempdir(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    where = Path(found.stdout.strip() or "?").resolve()
    if where != ROOT / "sqlq" / "__init__.py":
        sys.exit(
            f"{sys.executable} imports sqlq from {where}, not from {ROOT}: install it "
            f"editable (pip install -e '.[dev]') so worker processes run the mutants"
        )


def commit_number() -> int:
    """HEAD's number of commits (its place in the branch's history); from its hash in a
    shallow clone, whose history is cut."""

    def git(*args: str) -> str:
        found = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        if found.returncode != 0:
            sys.exit(f"--sample needs git: git {' '.join(args)}: {found.stderr.strip()}")
        return found.stdout.strip()

    if git("rev-parse", "--is-shallow-repository") == "true":
        return int(git("rev-parse", "HEAD")[:12], 16)
    return int(git("rev-list", "--count", "HEAD"))


def sample(mutants: list[Mutant], about: int, number: int) -> list[Mutant]:
    """Slice ``number mod S`` of ``mutants`` dealt into S = ceil(N / about) slices, in
    the order of the hashes of their names (see the module's docstring)."""
    ordered = sorted(mutants, key=lambda m: hashlib.sha256(m.name.encode()).hexdigest())
    slices = max(1, math.ceil(len(ordered) / max(1, about)))
    return ordered[number % slices :: slices]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="a mutant name or glob (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--sample", type=int, metavar="K", help="about K mutants: this commit's share of them"
    )
    args = parser.parse_args()
    chosen = [
        m for m in MUTANTS if not args.only or any(fnmatch.fnmatch(m.name, p) for p in args.only)
    ]
    if args.sample is not None:
        number = commit_number()
        slices = max(1, math.ceil(len(chosen) / max(1, args.sample)))
        chosen = sample(chosen, args.sample, number)
        print(f"commit {number}: slice {number % slices} of {slices}, {len(chosen)} mutants")
    if not chosen:
        sys.exit(f"no mutant matches {args.only}")
    check(chosen)
    installed_from_the_tree()
    if args.list:
        for m in chosen:
            print(f"{m.name:50} {m.path}")
        return 0

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    width = max(len(m.name) for m in chosen)
    results = []
    for m in chosen:
        started = time.monotonic()
        verdict = run(m)
        results.append(verdict)
        print(f"{m.name:{width}}  {verdict:10}  {time.monotonic() - started:6.1f} s", flush=True)
    killed = sum(v == "killed" for v in results)
    print(f"\n{killed} of {len(results)} mutants killed")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
