-- PostgreSQL prepares a table's CHECK constraints again for every statement
-- that writes a row (the expressions are read and planned per statement, not
-- cached), and sqlq's calls are single-row statements: with seventeen checks
-- that was about 65 us of server CPU per add, claim or completion, more than
-- the rest of an add's insert (bench/bounds.md).  Kept: the four that the
-- partial indexes and the due probes rely on (the states; a deadline exactly
-- while RESERVED; a wake-up time exactly while WAITING; a finish time exactly
-- when COMPLETED or DEAD).  The others restated what every write already
-- guarantees (attempts within bounds, a lease's token, one payload column,
-- the retry policy, non-empty names), which the SQLite schema still checks and
-- the conformance and property tests hold both backends to.
ALTER TABLE sqlq_tasks
    DROP CONSTRAINT sqlq_tasks_attempts_check,
    DROP CONSTRAINT sqlq_tasks_max_attempts_check,
    DROP CONSTRAINT sqlq_tasks_check1,
    DROP CONSTRAINT sqlq_tasks_check3,
    DROP CONSTRAINT sqlq_tasks_check5,
    DROP CONSTRAINT sqlq_tasks_check6,
    DROP CONSTRAINT sqlq_tasks_check7,
    DROP CONSTRAINT sqlq_tasks_check9,
    DROP CONSTRAINT sqlq_tasks_check,
    DROP CONSTRAINT sqlq_tasks_retry_base_check,
    DROP CONSTRAINT sqlq_tasks_retry_kind_check,
    DROP CONSTRAINT sqlq_tasks_name_check,
    DROP CONSTRAINT sqlq_tasks_queue_check;
