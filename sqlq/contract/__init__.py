"""What both faces of the queue agree on: states, transitions, limits, input checks.

A task is in exactly one of six states::

    add(delay) ──> WAITING ──(run_at reached)──┐
                      ^                        v
    add ─────────────────────────────────> AVAILABLE ──reserve──> RESERVED ──complete──> COMPLETED
                      │                        ^                      │
                      └── (retry delay > 0) ───┴── fail / expiry ─────┤ attempts < max_attempts
                                                                      └──> DEAD (all used)

``reserve`` (or ``claim``) counts one attempt.  A lease that runs out is handled
exactly like ``fail``.  ``redrive`` sends DEAD tasks back to the line with their
attempts reset; ``release`` gives a lease back without counting its attempt.
Nothing else leaves COMPLETED or DEAD.  Without delays and retry backoff no task
is ever WAITING, without ``cancel`` none is CANCELLED, and the four states of the
core contract are all there is.

Cancel and pause (see ``Queue.cancel``, ``Queue.pause``):

* ``cancel`` of an AVAILABLE or WAITING task ends it CANCELLED at once, a third
  finished state (finished_at set, attempts as they were; nothing leaves it but
  ``purge``).  ``cancel`` of a RESERVED task whose lease runs records a *stop
  request* and changes nothing else: its worker learns it at its next heartbeat
  (``heartbeat`` says so), and the task runs no more.  Its lease ends COMPLETED
  if its worker completes it (the work was done), and CANCELLED however else it
  ends: a failure (with or without retry), the lease running out, a release.
  The attempt counts.  ``cancel`` of anything else changes nothing.
* A paused queue hands out no lease (``reserve``, ``claim``, ``claim_many``
  find nothing and ``ready`` says False) until ``resume``; everything else
  works as before: adds, and the leases already out (complete, fail, extend,
  expiries, wake-ups).

Priorities (``add(..., priority=p)``, an int from MIN_PRIORITY to MAX_PRIORITY,
0 by default; see ``sqlq.rules.line_key``): a claim takes the AVAILABLE task with the
lowest *line key*, then the one that joined the line first.  A task's line key
is the time it joined the line (the time of the call that made it AVAILABLE:
its add, release, fail or redrive, or the first call after its wake-up or its
lease's expiry) minus ``p * aging`` seconds, ``aging`` (DEFAULT_AGING; positive)
being the option of the queue that added it (stored with the task, as its
max_attempts and retry policy, so whichever process retries or wakes it later
places it the same way): it is ordered as if it had joined ``p * aging``
seconds earlier (tasks of priority 0 at the time they joined, whatever the
aging).  So within one priority the line is FIFO, a task goes before
every task of a lower priority that joined less than ``Δp * aging`` seconds
before it, and a task waits for a higher-priority task that joins at most
``Δp * aging`` seconds after it, never for later ones: no priority starves.
With ``aging=None`` priorities are strict: aging is STRICT_AGING, more than any
two times differ, so a lower priority waits while any higher one is AVAILABLE.
One priority (all 0, the default) is the FIFO line of the core contract.

Per-key limits (see ``Queue.set_limit``): a task added with a group holds a slot
of it from its claim until its lease ends, however it ends (complete, fail,
release, cancel, expiry); a claim takes a grouped task only while its group has
fewer leases than its concurrency limit and its rate allows a start at the
call's time (starts ``per / rate`` apart).  Among the tasks it may take, a claim
takes the first in line (the lowest line key, see Priorities above), or
with ``fair`` the front of the group whose latest claim is the oldest, unless the
front of the ungrouped line comes before it.  Limits change no state: a task a
limit holds back stays AVAILABLE.  A change of limits never delays a group's next
start: a shorter spacing (or none, its rate removed) moves it back to the last
start plus the new spacing; a longer one applies from the next start on.  How a
database keeps the groups is its own and answers nothing differently: SQLite makes
its group triggers by a recorded on-demand migration at the first grouped add;
PostgreSQL has every call that moves tasks of a queue with grouped tasks, other
than a claim, take the queue's turn first, so that such calls never deadlock (a
claim never waits for a lock).

Idle groups are forgotten (so that a queue grouped per user does not keep a group
per user ever seen): ``purge`` also forgets every group of the queue that is idle
at the call's time, that is with no unfinished task (none WAITING, AVAILABLE or
RESERVED: no lease, nothing counted) and whose next start its rate allows is not
after the call's time.  A group's limits are not the group's: they are kept by
name (set_limit's, and the queue's default), and the next task of a forgotten
group, added or redriven, makes the group anew with them, as its first add did.
So forgetting never lets a group start sooner than its rate allows nor hold more
leases than its limit.  The one thing it changes is the round robin: a group that
comes back starts as a new group, with no latest claim, so a ``fair`` claim serves
it before the groups it has served since (as it would a group never seen); a group
not forgotten keeps its place, the time of its latest claim.

The contract's parts, one job each: ``states`` (the states, limits and shapes),
``checks`` (input checks), ``error_text`` (how a failure is written down),
``outcomes`` (results and progress) and ``batches`` (a batch call's items); every
name is importable from here but ``leases.check_leases`` (the completions a batch call
takes), which knows the Lease record and is left out so that a command's parser loads
no record.
"""

from .batches import check_batch, check_failures
from .checks import (
    check_aging,
    check_count,
    check_flag,
    check_group,
    check_limit,
    check_max_attempts,
    check_name,
    check_new_task_id,
    check_priority,
    check_queue_name,
    check_retry,
    check_rng,
    check_seconds,
    check_settings,
    check_start,
    check_states,
    check_task_id,
    check_task_ids,
    check_task_name,
    check_time,
    check_token,
    first_run,
    limit_key,
    time_after,
)
from .error_text import check_error, describe_error, error_message, undecodable_error
from .outcomes import check_progress, check_result, result_of
from .states import (
    DEFAULT_AGING,
    FINISHED,
    LEASE_EXPIRED,
    MAX_ATTEMPTS,
    MAX_BATCH,
    MAX_ERROR_LENGTH,
    MAX_ID_BYTES,
    MAX_ID_LENGTH,
    MAX_LEASE_SECONDS,
    MAX_LIMIT,
    MAX_PRIORITY,
    MAX_TIME,
    MAX_TOKEN,
    MIN_PRIORITY,
    NO_PRIORITY,
    NO_START,
    STRICT_AGING,
    Cancel,
    Completion,
    Limit,
    Number,
    Outcome,
    State,
)

__all__ = [
    "DEFAULT_AGING",
    "FINISHED",
    "LEASE_EXPIRED",
    "MAX_ATTEMPTS",
    "MAX_BATCH",
    "MAX_ERROR_LENGTH",
    "MAX_ID_BYTES",
    "MAX_ID_LENGTH",
    "MAX_LEASE_SECONDS",
    "MAX_LIMIT",
    "MAX_PRIORITY",
    "MAX_TIME",
    "MAX_TOKEN",
    "MIN_PRIORITY",
    "NO_PRIORITY",
    "NO_START",
    "STRICT_AGING",
    "Cancel",
    "Completion",
    "Limit",
    "Number",
    "Outcome",
    "State",
    "check_aging",
    "check_batch",
    "check_count",
    "check_error",
    "check_failures",
    "check_flag",
    "check_group",
    "check_limit",
    "check_max_attempts",
    "check_name",
    "check_new_task_id",
    "check_priority",
    "check_progress",
    "check_queue_name",
    "check_result",
    "check_retry",
    "check_rng",
    "check_seconds",
    "check_settings",
    "check_start",
    "check_states",
    "check_task_id",
    "check_task_ids",
    "check_task_name",
    "check_time",
    "check_token",
    "describe_error",
    "error_message",
    "first_run",
    "limit_key",
    "result_of",
    "time_after",
    "undecodable_error",
]
