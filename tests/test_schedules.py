"""Periodic tasks (sqlq.schedule): one task per tick on every face of the queue, catch-up
policies, DST, bad input, the stored state's compare-and-set, schedulers in real
processes, a worker's schedules with a fake clock, and `sqlq schedules`."""

from __future__ import annotations

import bisect
import json
import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from databases import queue_options

import sqlq
from sqlq import cli
from sqlq.backends import open_backend
from sqlq.errors import InvalidArgument, InvalidConfig
from sqlq.records import ScheduleState
from sqlq.schedule import MAX_CATCH_UP, Schedule, plan
from sqlq.testing import ManualClock

Factory = Callable[..., Any]

#: 2026-01-01T00:00:00Z, a Thursday.
T0 = 1_767_225_600


def _at(text: str) -> int:
    """Unix seconds of an ISO time in UTC ('2026-03-29T01:00')."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def _ids(queue: Any, now: float) -> list[str]:
    return [info.task_id for info in queue.tasks(now, limit=10_000)]


# --- on every face ---------------------------------------------------------------------


def test_a_new_schedule_starts_at_its_first_tick_and_adds_each_tick_once(
    make_queue: Factory,
) -> None:
    q = make_queue(30, 3)
    beat = Schedule("beat", every=60)
    first = q.tick(beat, now=T0 + 30)
    assert first.added == [] and first.next_at == T0 + 60
    assert q.tick(beat, now=T0 + 59).added == []
    ticked = q.tick(beat, now=T0 + 61)
    assert ticked.added == ["beat@2026-01-01T00:01:00Z"] and ticked.next_at == T0 + 120
    assert q.tick(beat, now=T0 + 62).added == []  # the same tick again: refused
    assert _ids(q, T0 + 62) == ["beat@2026-01-01T00:01:00Z"]


def test_the_task_of_a_tick_carries_the_name_the_kwargs_and_the_tick(make_queue: Factory) -> None:
    q = make_queue(30, 3)
    report = Schedule(
        "report", every=3600, task="app.report", kwargs={"kind": "daily"}, with_tick=True,
        max_attempts=7,
    )  # fmt: skip
    q.tick(report, now=T0 - 1)
    assert q.tick(report, now=T0 + 5).added == ["report@2026-01-01T00:00:00Z"]
    lease = q.claim(T0 + 5)
    assert lease is not None and lease.name == "app.report"
    assert lease.payload == {"kind": "daily", "tick": T0}
    info = q.info(lease.task_id, T0 + 5)
    assert info is not None and info.max_attempts == 7


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("all", [T0 + 60 * i for i in range(1, 11)]),
        ("latest", [T0 + 600]),
        ("none", []),
    ],
)
def test_ticks_missed_while_nothing_ran_follow_the_catch_up_policy(
    make_queue: Factory, policy: str, expected: list[int]
) -> None:
    q = make_queue(30, 3)
    beat = Schedule("beat", every=60, catch_up=policy, grace=30)
    q.tick(beat, now=T0)
    ticked = q.tick(beat, now=T0 + 600 + 45)  # ten ticks missed; the last 45 s ago
    assert ticked.added == [beat.task_id(t) for t in expected]
    assert ticked.next_at == T0 + 660
    assert q.tick(beat, now=T0 + 661).added == [beat.task_id(T0 + 660)]  # on time: every policy


def test_policy_none_enqueues_a_tick_seen_within_its_grace(make_queue: Factory) -> None:
    q = make_queue(30, 3)
    beat = Schedule("beat", every=60, catch_up="none", grace=30)
    q.tick(beat, now=T0)
    assert q.tick(beat, now=T0 + 120 + 30).added == [beat.task_id(T0 + 120)]


def test_catch_up_all_adds_at_most_the_cap_per_call_and_goes_on_where_it_stopped(
    make_queue: Factory,
) -> None:
    q = make_queue(30, 3)
    beat = Schedule("beat", every=1, catch_up="all")
    q.tick(beat, now=T0)
    missed = MAX_CATCH_UP + 500
    now = T0 + missed
    first = q.tick(beat, now=now)
    assert len(first.added) == MAX_CATCH_UP
    assert first.next_at == T0 + MAX_CATCH_UP + 1  # due already: the caller ticks again
    second = q.tick(beat, now=now)
    assert second.added == [beat.task_id(T0 + i) for i in range(MAX_CATCH_UP + 1, missed + 1)]
    assert q.tick(beat, now=now).added == []


def test_a_purged_tick_is_never_enqueued_again(make_queue: Factory) -> None:
    q = make_queue(30, 3)
    beat = Schedule("beat", every=60, catch_up="all")
    q.tick(beat, now=T0)
    assert q.tick(beat, now=T0 + 60).added == [beat.task_id(T0 + 60)]
    lease = q.claim(T0 + 60)
    assert lease is not None and q.complete(lease.task_id, T0 + 60, token=lease.token)
    assert q.purge(T0 + 61) == 1
    assert q.tick(beat, now=T0 + 61).added == []
    assert q.tick(beat, now=T0 + 120).added == [beat.task_id(T0 + 120)]


def test_schedules_are_kept_apart_by_name(make_queue: Factory) -> None:
    q = make_queue(30, 3)
    fast, slow = Schedule("fast", every=60), Schedule("slow", every=120)
    q.tick(fast, now=T0)
    q.tick(slow, now=T0)
    assert q.tick(fast, now=T0 + 120).added == ["fast@2026-01-01T00:02:00Z"]
    assert q.tick(slow, now=T0 + 120).added == ["slow@2026-01-01T00:02:00Z"]


def test_a_forgotten_schedule_starts_anew_at_its_next_tick_and_its_tasks_stay(
    make_queue: Factory,
) -> None:
    q = make_queue(30, 3)
    beat = Schedule("beat", every=60, catch_up="all")
    q.tick(beat, now=T0)
    assert q.tick(beat, now=T0 + 60).added == [beat.task_id(T0 + 60)]
    assert q.forget_schedule("beat", now=T0 + 61) is True
    assert q.forget_schedule("beat", now=T0 + 61) is False  # nothing kept any more
    assert q.forget_schedule("other", now=T0 + 61) is False
    # Ticked again after five missed ticks: a new schedule, which catches none of them up.
    assert q.tick(beat, now=T0 + 370).added == []
    assert q.tick(beat, now=T0 + 421).added == [beat.task_id(T0 + 420)]
    assert _ids(q, T0 + 421) == [beat.task_id(T0 + 60), beat.task_id(T0 + 420)]
    with pytest.raises(InvalidArgument, match="schedule name"):
        q.forget_schedule(b"beat", now=T0 + 421)


def test_tick_takes_a_schedule(make_queue: Factory) -> None:
    q = make_queue(30, 3)
    with pytest.raises(InvalidConfig, match=r"sqlq\.Schedule"):
        q.tick("*/5 * * * *", now=T0)


# --- the stored state: a compare-and-set ---------------------------------------------------


def test_the_stored_state_moves_only_from_the_cursor_that_was_read(queue_url: str) -> None:
    """The port's save_schedule is a compare-and-set on handled_until: a scheduler that
    read a state another one has moved since changes nothing."""
    backend = open_backend(queue_url, **queue_options(queue_url))
    state = ScheduleState("default", "beat", None, "every 60", "UTC", "all", 100, None, 100)
    moved = state._replace(handled_until=160, last_enqueued=160, updated_at=170)
    stale = state._replace(handled_until=220, last_enqueued=220, updated_at=230)
    try:
        with backend.transaction(170, "default", None, lambda tx, asked: None) as tx:
            assert tx.save_schedule(state, None)
            assert not tx.save_schedule(state, None)  # stored already
            assert tx.save_schedule(moved, 100)
            assert not tx.save_schedule(stale, 100)  # read before the move: refused
            assert tx.schedule("default", "beat") == moved
            assert tx.schedule("other", "beat") is None
        assert backend.schedules() == [moved]
    finally:
        backend.close()


def _tick_and_drain(url: str, start: Any, window: tuple[int, int], out: Any) -> None:
    """A scheduler process: tick the schedule at every second of the window, claiming,
    completing and purging what it finds at once, so that a tick enqueued twice could
    be added again; report every task id it added."""
    schedule = Schedule("beat", every=3, catch_up="all")
    added: list[str] = []
    with sqlq.Queue(url, lease_seconds=60, max_attempts=3, **queue_options(url)) as q:
        start.wait()
        for now in range(*window):
            added += q.tick(schedule, now=now).added
            for lease in q.claim_many(100, now=now):
                q.complete(lease.task_id, now, token=lease.token)
            q.purge(now)
    out.put(added)


@pytest.mark.processes
def test_schedulers_in_processes_enqueue_each_tick_exactly_once(queue_url: str) -> None:
    schedule = Schedule("beat", every=3, catch_up="all")
    with sqlq.Queue(queue_url, lease_seconds=60, max_attempts=3, **queue_options(queue_url)) as q:
        assert q.tick(schedule, now=T0).added == []  # the schedule starts at T0
    context = multiprocessing.get_context("spawn")
    start, out = context.Event(), context.Queue()
    window = (T0 + 1, T0 + 301)
    processes = [
        context.Process(target=_tick_and_drain, args=(queue_url, start, window, out))
        for _ in range(3)
    ]
    for process in processes:
        process.start()
    start.set()
    added = Counter(task_id for _ in processes for task_id in out.get(timeout=300))
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    expected = {schedule.task_id(t) for t in range(T0 + 3, window[1], 3)}
    assert set(added) == expected
    assert max(added.values()) == 1


# --- time zones and DST (what cronsim does) -----------------------------------------------


def _ticks(schedule: Schedule, start: str, count: int) -> list[str]:
    found, at = [], _at(start)
    for _ in range(count):
        tick = schedule.next_tick(at)
        assert tick is not None
        found.append(datetime.fromtimestamp(tick, UTC).isoformat()[:16])
        at = tick
    return found


def test_a_fixed_time_in_the_hour_skipped_in_spring_fires_once_at_the_end_of_the_gap() -> None:
    # Europe/Paris, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
    nightly = Schedule("nightly", cron="30 2 * * *", tz="Europe/Paris")
    assert _ticks(nightly, "2026-03-28T12:00", 3) == [
        "2026-03-29T01:00",  # 03:00 CEST: 02:30 does not exist that day
        "2026-03-30T00:30",  # 02:30 CEST
        "2026-03-31T00:30",
    ]


def test_a_fixed_time_in_the_hour_repeated_in_autumn_fires_once_at_its_first_occurrence() -> None:
    # Europe/Paris, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC).
    nightly = Schedule("nightly", cron="30 2 * * *", tz="Europe/Paris")
    assert _ticks(nightly, "2026-10-24T12:00", 3) == [
        "2026-10-25T00:30",  # 02:30 CEST, the first 02:30; not again at 02:30 CET
        "2026-10-26T01:30",  # 02:30 CET
        "2026-10-27T01:30",
    ]


def test_an_expression_with_a_wildcard_hour_follows_the_real_time_across_dst() -> None:
    half_hourly = Schedule("half", cron="*/30 * * * *", tz="Europe/Paris")
    # Autumn: 02:00 and 02:30 come twice, and fire twice (every 30 real minutes).
    assert _ticks(half_hourly, "2026-10-24T23:50", 4) == [
        "2026-10-25T00:00",  # 02:00 CEST
        "2026-10-25T00:30",  # 02:30 CEST
        "2026-10-25T01:00",  # 02:00 CET
        "2026-10-25T01:30",  # 02:30 CET
    ]
    # Spring: 02:00 to 03:00 does not exist; nothing fires in it.
    assert _ticks(half_hourly, "2026-03-29T00:10", 3) == [
        "2026-03-29T00:30",  # 01:30 CET
        "2026-03-29T01:00",  # 03:00 CEST
        "2026-03-29T01:30",
    ]


@pytest.mark.parametrize("cron", ["30 2 * * *", "45 1 * * *", "*/30 * * * *", "0 3 * * 0"])
@pytest.mark.parametrize(
    ("zone", "day"),
    [
        ("Europe/Paris", "2026-03-29"),
        ("Europe/Paris", "2026-10-25"),
        ("Australia/Lord_Howe", "2026-04-05"),  # the clock goes back 30 minutes
        ("Australia/Lord_Howe", "2026-10-04"),
    ],
)
def test_the_latest_tick_is_the_last_of_the_ticks_forward_across_dst(
    cron: str, zone: str, day: str
) -> None:
    """Policy "latest" looks backwards from now; it finds what going forward finds."""
    schedule = Schedule("s", cron=cron, tz=zone)
    start = _at(f"{day}T00:00") - 86400
    forward, at = [], start - 8 * 86400  # before the last weekly tick
    while (tick := schedule.next_tick(at)) is not None and tick <= start + 3 * 86400:
        forward.append(tick)
        at = tick
    for now in range(start, start + 3 * 86400, 300):
        latest = forward[bisect.bisect_right(forward, now) - 1]
        assert schedule.latest_tick(now) == latest, now


def test_ticks_of_a_zone_are_at_its_wall_clock_time() -> None:
    morning = Schedule("m", cron="0 9 * * *", tz="America/New_York")
    assert plan(morning, _at("2026-01-01T00:00"), _at("2026-01-01T15:00")).ticks == [
        _at("2026-01-01T14:00")
    ]


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression"),
        ({"cron": "* * *"}, "invalid cron expression"),
        ({"cron": 5}, "cron must be a str"),
        ({"every": 60, "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"every": 60, "tz": None}, "time zone name"),
        ({"every": 60, "catch_up": "some"}, "catch_up must be one of all, latest, none"),
        ({"every": 0}, "every must be a whole number of seconds"),
        ({"every": 1.5}, "every must be a whole number of seconds"),
        ({"every": True}, "every must be a whole number of seconds"),
        ({}, "give cron or every"),
        ({"cron": "* * * * *", "every": 60}, "give cron or every"),
        ({"every": 60, "grace": -1}, "grace"),
        ({"every": 60, "kwargs": {"x": object()}}, "kwargs cannot be stored"),
        ({"every": 60, "kwargs": [1]}, "kwargs must be a mapping"),
        ({"every": 60, "max_attempts": 0}, "max_attempts"),
        ({"every": 60, "task": ""}, "task name"),
    ],
)
def test_a_bad_schedule_is_refused_with_invalid_config(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidConfig, match=message):
        Schedule("s", **options)


@pytest.mark.parametrize("name", ["", "x" * 1004, "a\x00b", 7])
def test_a_bad_schedule_name_is_refused(name: Any) -> None:
    with pytest.raises(InvalidConfig):
        Schedule(name, every=60)


def test_a_periodic_task_whose_kwargs_the_function_cannot_take_is_refused() -> None:
    tasks = sqlq.Tasks()

    def report(kind: str) -> None: ...

    with pytest.raises(InvalidConfig, match="cannot take these arguments"):
        tasks.periodic(every=60, kwargs={"knd": "daily"})(report)
    with pytest.raises(InvalidConfig, match="unknown time zone"):
        tasks.periodic(every=60, tz="Nowhere/Land", kwargs={"kind": "daily"})(report)


def test_two_schedules_of_one_name_are_refused() -> None:
    tasks = sqlq.Tasks()
    tasks.periodic(every=60, schedule="beat", name="one")(lambda: None)
    with pytest.raises(InvalidConfig, match="registered already"):
        tasks.periodic(every=60, schedule="beat", name="two")(lambda: None)


# --- declared in code, run by a worker ----------------------------------------------------


def test_periodic_registers_the_task_and_passes_the_tick_only_to_a_function_that_takes_it() -> None:
    tasks = sqlq.Tasks()

    @tasks.periodic(cron="*/5 * * * *", tz="Europe/Paris", catch_up="all", kwargs={"n": 1})
    def with_tick(n: int, tick: int) -> None: ...

    @tasks.task(name="plain", max_attempts=4)
    def plain() -> None: ...

    tasks.periodic(every=60)(plain)  # a Task of the registry: scheduled as it is
    first, second = tasks.schedules
    assert first.name == with_tick.name and first.task == with_tick.name and first.with_tick
    assert (first.cron, first.tz, first.catch_up, first.kwargs) == (
        "*/5 * * * *", "Europe/Paris", "all", {"n": 1},
    )  # fmt: skip
    assert second.name == "plain" and not second.with_tick and second.max_attempts == 4
    assert len(tasks) == 2


def test_a_worker_runs_its_schedules_by_its_clock(tmp_path: Path) -> None:
    clock = ManualClock(start=T0 + 10)
    queue = sqlq.Queue(
        tmp_path / "q.db", lease_seconds=30, max_attempts=3, clock=clock.time,
        synchronous="normal",
    )  # fmt: skip
    tasks = sqlq.Tasks()
    ran: list[tuple[str, int]] = []

    @tasks.periodic(every=60, kwargs={"what": "beat"})
    def beat(what: str, tick: int) -> None:
        ran.append((what, tick))

    extra = Schedule("extra", every=120, task=beat.name, kwargs={"what": "extra"}, with_tick=True)
    worker = sqlq.Worker(queue, tasks, clock=clock, schedules=[extra])
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        clock.wait_for_sleepers(2)  # the claim loop and the monitor, schedules stored
        assert ran == []
        for minute in range(1, 5):
            clock.advance(60)
            _wait_for(lambda m=minute: len(ran) >= m + m // 2, f"the ticks of minute {minute}")
            # completed before the clock moves on: a lease still held then would run out
            _wait_for(lambda: queue.stats().leases == 0, f"the completions of minute {minute}")
            clock.wait_for_sleepers(2)
    finally:
        worker.stop()
        thread.join(30)
    assert sorted(ran, key=lambda item: (item[1], item[0])) == [
        ("beat", T0 + 60),
        ("beat", T0 + 120),
        ("extra", T0 + 120),
        ("beat", T0 + 180),
        ("beat", T0 + 240),
        ("extra", T0 + 240),
    ]
    queue.close()


def test_a_worker_refuses_two_schedules_of_one_name(tmp_path: Path) -> None:
    with sqlq.Queue(tmp_path / "q.db", lease_seconds=30, max_attempts=3) as queue:
        twice = [Schedule("s", every=60), Schedule("s", every=30)]
        with pytest.raises(InvalidConfig, match="same name"):
            sqlq.Worker(queue, lambda payload: None, schedules=twice)
        with pytest.raises(InvalidConfig, match=r"iterable of sqlq\.Schedule"):
            sqlq.Worker(queue, lambda payload: None, schedules=Schedule("s", every=60))  # type: ignore[arg-type]


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# --- sqlq schedules ------------------------------------------------------------------------


def test_the_cli_lists_the_schedules_with_their_next_run(
    queue_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3, **queue_options(queue_url)) as q:
        assert cli.main(["schedules", queue_url]) == 0
        assert "no schedules" in capsys.readouterr().out
        nightly = Schedule("nightly", cron="30 2 * * *", tz="Europe/Paris", task="app.report")
        q.tick(nightly, now=now - 2 * 86400)
        q.tick(nightly, now=now)
        q.tick(Schedule("beat", every=300, catch_up="all"), now=now)
    assert cli.main(["schedules", queue_url, "--json"]) == 0
    found = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    last = nightly.latest_tick(now)
    assert found["nightly"]["spec"] == "cron 30 2 * * *"
    assert found["nightly"]["tz"] == "Europe/Paris" and found["nightly"]["task"] == "app.report"
    assert found["nightly"]["last_enqueued"] == last
    assert found["nightly"]["next_run"] == nightly.next_tick(now)
    assert found["beat"]["catch_up"] == "all" and found["beat"]["last_enqueued"] is None
    assert found["beat"]["next_run"] == (int(now) // 300 + 1) * 300
    assert cli.main(["schedules", queue_url]) == 0
    out = capsys.readouterr().out
    assert "nightly" in out and "Europe/Paris" in out and "every 300" in out
    assert datetime.fromtimestamp(last, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") in out


def test_the_cli_forgets_a_schedule_no_worker_runs(
    queue_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3, **queue_options(queue_url)) as q:
        q.tick(Schedule("old-report", every=300), now=now)
        q.tick(Schedule("beat", every=60), now=now)
    assert cli.main(["unschedule", queue_url, "old-report", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["forgotten"] is True
    assert cli.main(["schedules", queue_url, "--json"]) == 0
    assert [s["name"] for s in json.loads(capsys.readouterr().out)] == ["beat"]
    assert cli.main(["unschedule", queue_url, "old-report"]) == 1
    assert "keeps no schedule 'old-report'" in capsys.readouterr().out
    assert cli.main(["unschedule", queue_url, "beat", "--queue", "other"]) == 1


def test_a_registry_worker_refuses_a_schedule_whose_task_it_cannot_run(tmp_path: Path) -> None:
    """A Schedule given to a worker of a Tasks registry adds tasks that registry runs: a
    task it does not know, or kwargs its function cannot take, would send every tick's
    task to DEAD, so the worker refuses the schedule when it is made."""
    tasks = sqlq.Tasks()

    @tasks.task(name="report")
    def report(kind: str) -> None: ...

    with sqlq.Queue(tmp_path / "q.db", lease_seconds=30, max_attempts=3) as queue:
        for schedule, why in [
            (Schedule("s", every=60, task="missing", kwargs={"kind": "x"}), "'missing'"),
            (Schedule("s", every=60, kwargs={"kind": "x"}), "None"),
            (Schedule("s", every=60, task="report"), "kind"),
            (Schedule("s", every=60, task="report", kwargs={"kind": "x", "extra": 1}), "extra"),
        ]:
            with pytest.raises(InvalidConfig, match=why):
                sqlq.Worker(queue, tasks, schedules=[schedule])
        good = Schedule("s", every=60, task="report", kwargs={"kind": "x"})
        assert sqlq.Worker(queue, tasks, schedules=[good]).schedules == [good]


def test_a_worker_refuses_a_schedule_whose_tasks_its_queue_cannot_hold(tmp_path: Path) -> None:
    """The queue's max_payload_bytes is below what a schedule's kwargs (and its largest
    tick) encode to: every tick after the first would raise PayloadTooLarge out of the
    worker's run(), so the worker refuses the schedule when it is made."""
    roomy = Schedule("s", every=60, kwargs={"k": "x" * 40}, with_tick=True)
    with sqlq.Queue(tmp_path / "q.db", lease_seconds=30, max_attempts=3, max_payload_bytes=64) as q:
        with pytest.raises(InvalidConfig, match="payload is 68 bytes"):
            sqlq.Worker(q, lambda payload: None, schedules=[roomy])
        small = Schedule("s", every=60, kwargs={"k": "x" * 30}, with_tick=True)
        assert sqlq.Worker(q, lambda payload: None, schedules=[small]).schedules == [small]
        q.tick(small, now=T0)  # its largest tick fits
        assert len(q.tick(small, now=_at("9998-12-30T00:00")).added) == 1


def test_an_idle_worker_ticks_on_time_however_long_its_polls(tmp_path: Path) -> None:
    """An idle worker polls every poll_max seconds at most; its pause must still end
    when a schedule is due, or a tick comes up to poll_max late (and a policy "none"
    tick later than its grace is skipped)."""
    clock = ManualClock(start=T0 + 10)
    queue = sqlq.Queue(tmp_path / "q.db", lease_seconds=30, max_attempts=3, clock=clock.time)
    ran: list[int] = []
    on_time = Schedule("beat", every=60, catch_up="none", grace=5, with_tick=True)
    worker = sqlq.Worker(
        queue, lambda payload: ran.append(payload["tick"]), clock=clock, poll_min=600,
        poll_max=600, schedules=[on_time],
    )  # fmt: skip
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        clock.wait_for_sleepers(2)  # the claim loop (idle) and the monitor
        clock.advance(50)  # T0 + 60: the first tick
        _wait_for(lambda: ran == [T0 + 60], "the tick of T0 + 60, on time")
    finally:
        worker.stop()
        thread.join(30)
    queue.close()
