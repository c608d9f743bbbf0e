"""Dedupe keys (sqlq.keys), on every face: who holds a key and for how long, what an
add that finds it held does (refuse, merge, debounce), the answer that names the
holder, bad input; the indexes the holder lookup uses; and, with real processes
adding the same keys at once, that a key never has two holders."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from databases import kind, queue_options

import sqlq
from sqlq import Retry, cli
from sqlq.errors import InvalidArgument
from sqlq.keys import Added, Keyed

Factory = Callable[..., Any]  # the make_queue fixture of conftest.py


# --- who holds a key ------------------------------------------------------------------


def test_an_add_whose_key_is_held_is_refused_and_named_the_holder(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    first = q.add("a", 0, key="user:42", payload=1)
    assert first == Added(Keyed.ADDED, "a") and first
    second = q.add("b", 1, key="user:42", payload=2)
    assert second == Added(Keyed.REFUSED, "a") and not second
    assert q.status("b", 1) is None and q.info("a", 1).payload == 1
    assert q.add("c", 1, key="user:43") == Added(Keyed.ADDED, "c")  # another key is free
    assert q.add("a", 1) is False  # without a key the answer is add's bool, as ever


def test_the_key_is_held_while_waiting_available_reserved_and_retried(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3, retry=Retry.fixed(5))
    assert q.add("a", 0, key="k", delay=5)  # WAITING
    assert not q.add("x", 1, key="k")
    assert q.status("a", 5) == "AVAILABLE" and not q.add("x", 5, key="k")
    lease = q.claim(5)  # RESERVED
    assert not q.add("x", 6, key="k")
    assert q.fail("a", 6, token=lease.token) == "WAITING"  # a retry still holds it
    assert q.add("x", 7, key="k") == Added(Keyed.REFUSED, "a")
    q.claim(11)  # the lease runs out at 21: an expiry is a failure, and holds it too
    assert q.add("x", 22, key="k") == Added(Keyed.REFUSED, "a")
    assert q.status("a", 22) == "WAITING"


@pytest.mark.parametrize("end", ["COMPLETED", "DEAD", "CANCELLED"])
def test_the_key_is_free_once_the_holder_finishes(make_queue: Factory, end: str) -> None:
    q = make_queue(10, 1)
    q.add("a", 0, key="k")
    if end == "CANCELLED":
        q.cancel("a", 1)
    else:
        lease = q.claim(1)
        (q.complete if end == "COMPLETED" else q.fail)("a", 1, token=lease.token)
    assert q.status("a", 2) == end
    assert q.add("b", 2, key="k") == Added(Keyed.ADDED, "b")
    assert q.info("b", 2).key == "k" and q.info("a", 2).key == "k"


def test_a_key_window_holds_the_key_after_the_holder_finished(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    q.add("a", 0, key="k")
    q.complete("a", 5, token=q.claim(1).token)  # finished at 5
    assert q.add("b", 10, key="k", key_window=6) == Added(Keyed.REFUSED, "a")
    assert q.add("b", 10, key="k", key_window=6, on_key="merge") == Added(Keyed.MERGED, "a")
    assert q.add("b", 10, key="k", key_window=6, on_key="debounce") == Added(Keyed.REFUSED, "a")
    assert q.add("b", 11, key="k", key_window=6) == Added(Keyed.ADDED, "b")  # 6 s ago: free
    q.complete("b", 12, token=q.claim(12).token)
    assert q.add("c", 13, key="k", key_window=100) == Added(Keyed.REFUSED, "b")  # the latest
    assert q.purge(13, older_than=0) == 2
    assert q.add("c", 13, key="k", key_window=100) == Added(Keyed.ADDED, "c")  # purged: free


def test_an_id_that_exists_is_answered_as_add_answers_it(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    q.add("a", 0)
    assert q.add("a", 1, key="k") == Added(Keyed.EXISTS, None)
    assert not q.add("a", 1, key="k") and q.info("a", 1).key is None
    assert q.add("b", 1, key="k") == Added(Keyed.ADDED, "b")  # the key stayed free
    assert q.claim(2).token == 3  # the refused add took no counter value (a 1, b 2)


# --- merge and debounce -------------------------------------------------------------------


def test_merge_absorbs_the_add_and_names_the_holder(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("a", 0, key="k", payload="first")
    q.claim(1)
    merged = q.add("b", 2, key="k", payload="second", on_key="merge")
    assert merged == Added(Keyed.MERGED, "a") and merged
    assert q.status("b", 2) is None and q.info("a", 2).payload == "first"


def test_debounce_replaces_a_waiting_holders_payload_and_pushes_its_run_time(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add("a", 0, key="k", payload=1, delay=10)
    answer = q.add("b", 8, key="k", payload=2, delay=10, on_key="debounce")
    assert answer == Added(Keyed.DEBOUNCED, "a") and answer
    info = q.info("a", 8)
    assert (info.state, info.run_at, info.payload) == ("WAITING", 18, 2)
    assert q.claim(17) is None
    lease = q.claim(18)
    assert (lease.task_id, lease.payload) == ("a", 2)


def test_debounce_of_an_available_holder(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("x", 0)
    q.add("a", 0, key="k", payload=1)
    q.add("y", 0)
    # No delay: the holder keeps its place in the line, with the new payload.
    assert q.add("b", 1, key="k", payload=2, on_key="debounce") == Added(Keyed.DEBOUNCED, "a")
    assert q.status("a", 1) == "AVAILABLE"
    assert [(lease.task_id, lease.payload) for lease in q.claim_many(3, 1)] == [
        ("x", None), ("a", 2), ("y", None)
    ]  # fmt: skip
    # With a delay: it leaves the line and waits; at its time it joins the back.
    q.add("c", 2, key="k2", payload=1)
    q.add("z", 2)
    assert q.add("d", 3, key="k2", payload=3, run_at=7, on_key="debounce")
    assert (q.status("c", 3), q.info("c", 3).run_at) == ("WAITING", 7)
    q.add("w", 8)
    assert [lease.task_id for lease in q.claim_many(3, 8)] == ["z", "c", "w"]


def test_debounce_without_a_delay_wakes_a_waiting_holder_at_the_back(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("a", 0, key="k", delay=100)
    q.add("x", 1)
    assert q.add("b", 2, key="k", payload="now", on_key="debounce") == Added(Keyed.DEBOUNCED, "a")
    assert [(lease.task_id, lease.payload) for lease in q.claim_many(2, 2)] == [
        ("x", None), ("a", "now")
    ]  # fmt: skip


def test_debounce_of_a_running_holder_is_refused(make_queue: Factory) -> None:
    """The handler may have read the payload already, and a second holder cannot
    exist: the add is refused, naming the holder, and the holder is unchanged."""
    q = make_queue(10, 3)
    q.add("a", 0, key="k", payload=1)
    q.claim(1)
    answer = q.add("b", 2, key="k", payload=2, on_key="debounce")
    assert answer == Added(Keyed.REFUSED, "a") and not answer
    info = q.info("a", 2)
    assert (info.state, info.payload) == ("RESERVED", 1) and q.status("b", 2) is None


# --- redrive, bad input, the other faces ---------------------------------------------------


def test_redrive_leaves_dead_a_task_whose_key_another_holds(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    q.add("a", 0, key="k")
    q.fail("a", 1, token=q.claim(1).token)  # DEAD: the key is free
    q.add("b", 2, key="k")
    assert q.redrive(3) == 0 and q.status("a", 3) == "DEAD"
    q.cancel("b", 4)
    assert q.redrive(5, ["a"]) == 1 and q.status("a", 5) == "AVAILABLE"
    assert q.add("c", 6, key="k") == Added(Keyed.REFUSED, "a")  # the redriven task holds it


@pytest.mark.parametrize(
    "options",
    [
        {"key": ""},
        {"key": 42},
        {"key": "k" * 1025},
        {"key": "nul\x00"},
        {"key": "k", "key_window": -1},
        {"key": "k", "key_window": "1"},
        {"key": "k", "on_key": "replace"},
        {"on_key": "merge"},
        {"key_window": 5},
    ],
)
def test_bad_keys_and_options_are_refused_before_anything_changes(
    make_queue: Factory, options: dict[str, Any]
) -> None:
    q = make_queue(10, 1)
    with pytest.raises(InvalidArgument):
        q.add("t", 0, **options)
    assert q.status("t", 0) is None


def test_async_queue_and_a_registry_add_with_keys(queue_url: str) -> None:
    tasks = sqlq.Tasks()

    @tasks.task
    def reindex(user: int) -> None:
        pass

    with sqlq.Queue(queue_url, lease_seconds=10, max_attempts=1, **queue_options(queue_url)) as q:
        first = reindex.enqueue(q, {"user": 42}, key="user:42:reindex", delay=10)
        assert first is not None
        again = reindex.enqueue(q, {"user": 42}, key="user:42:reindex", on_key="debounce")
        assert again == first and q.status(first) == "AVAILABLE"
        assert reindex.enqueue(q, {"user": 42}, key="user:42:reindex") is None

        async def through_asyncio() -> Any:
            aq = sqlq.AsyncQueue(q)
            return await aq.add("other", key="user:42:reindex", on_key="merge")

        assert asyncio.run(through_asyncio()) == Added(Keyed.MERGED, first)


# --- indexed, never a scan ------------------------------------------------------------------


def test_the_holder_lookup_and_the_keyed_insert_probe_indexes(queue_url: str) -> None:
    """EXPLAIN of key_holder: both of its probes use the keys' partial indexes (on
    PostgreSQL with sequential scans off, since on a small table it would rather
    scan: what matters is that an index can serve the probe)."""
    with sqlq.Queue(queue_url, lease_seconds=10, max_attempts=1, **queue_options(queue_url)) as q:
        q.add("t", key="k")
        backend: Any = q._backend
        if kind(queue_url) == "sqlite":
            from sqlq.sqlite.queries import Q

            conn = backend._connection()
            rows = conn.execute("EXPLAIN QUERY PLAN " + Q.key_holder, ("default", "k", 0.0))
            plan = " | ".join(row[-1] for row in rows)
            redrive = conn.execute(
                "EXPLAIN QUERY PLAN " + Q.redrive_task, {"id": 1, "seq": 9, "now": 1}
            )
            plan_redrive = " | ".join(row[-1] for row in redrive)
        else:
            from sqlq.postgresql.queries import Q

            conn = backend._connection()
            conn.execute("SET enable_seqscan = off")
            params = {"queue": "default", "key": "k", "cutoff": 0.0}
            plan = " | ".join(r[0] for r in conn.execute("EXPLAIN " + Q.key_holder, params))
            params = {"id": 1, "now": 1.0, "keyed": True}
            redrive = conn.execute("EXPLAIN " + Q.redrive_task, params)
            plan_redrive = " | ".join(r[0] for r in redrive)
            conn.execute("RESET enable_seqscan")
    assert "sqlq_tasks_key_holder" in plan and "sqlq_tasks_key_finished" in plan, plan
    assert "SCAN sqlq_tasks " not in plan + " " and "Seq Scan" not in plan, plan
    assert "sqlq_tasks_key_holder" in plan_redrive, plan_redrive


# --- never two holders, with processes adding at once ---------------------------------------

ADDER = textwrap.dedent(
    """
    import json, os, sys, time
    import sqlq
    url, me, go, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    rounds, keys = int(sys.argv[5]), int(sys.argv[6])
    answers = []
    with sqlq.Queue(url, lease_seconds=30, max_attempts=1, **options) as q:
        q.counts()  # connected before the start
        deadline = time.monotonic() + 120
        while not os.path.exists(go):
            assert time.monotonic() < deadline, "no start"
        for r in range(rounds):
            for k in range(keys):
                on_key = "merge" if (r + k) % 2 else "refuse"
                answer = q.add(f"{me}-{r}-{k}", key=f"r{r}-k{k}", on_key=on_key)
                answers.append([f"r{r}-k{k}", answer.outcome.value, answer.holder])
    print(json.dumps(answers))
    """
)


def test_processes_adding_the_same_keys_at_once_make_one_holder_per_key(
    queue_url: str, tmp_path: Path
) -> None:
    """Four processes add tasks of the same fresh keys at the same moments: every key
    gets exactly one task, and every other add of it names that task as the holder
    (refused or merged).  On PostgreSQL the adds run concurrently: without the unique
    index over holders both of two adds that looked for a holder at once would add."""
    rounds, keys, processes = 40, 5, 4
    go = tmp_path / "go"
    options = json.dumps(queue_options(queue_url))
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1, **queue_options(queue_url)) as q:
        q.counts()  # the schema exists before the processes open it
        command = [sys.executable, "-c", ADDER, queue_url]
        arguments = [str(go), options, str(rounds), str(keys)]
        children = [
            subprocess.Popen(
                [*command, f"p{n}", *arguments],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(processes)
        ]
        try:
            go.touch()
            outputs = [child.communicate(timeout=300) for child in children]
        finally:
            for child in children:
                child.kill()
                child.wait()
        for child, (_, stderr) in zip(children, outputs, strict=True):
            assert child.returncode == 0, stderr
        answers = [answer for out, _ in outputs for answer in json.loads(out)]
        stored = Counter(info.key for info in q.tasks(state="AVAILABLE", limit=10_000))
    assert len(answers) == rounds * keys * processes
    holders: dict[str, str] = {}
    for key, outcome, holder in answers:
        if outcome == "added":
            assert key not in holders, f"two tasks added with {key}: {holders[key]}, {holder}"
            holders[key] = holder
    assert len(holders) == rounds * keys
    for key, outcome, holder in answers:
        assert outcome in ("added", "refused", "merged") and holder == holders[key]
    assert stored == Counter(dict.fromkeys(holders, 1))


# --- the command line ------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main([*args[:1], url, *args[1:]])
    except SystemExit as exc:  # argparse's refusals
        code = int(str(exc.code))
    out, err = capsys.readouterr()
    return code, out, err


def test_sqlq_add_key_answers_with_the_holder_and_show_and_list_show_keys(
    queue_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, queue_url, "add", "a", "--key", "user:42", "--payload", "1")
    assert code == 0 and out.endswith(  # added: the holder is the new task, said as always
        "added 1 task to queue 'default'; 0 already existed\nkey user:42 is held by task a\n"
    )
    code, out, _ = _cli(capsys, queue_url, "add", "a", "--key", "other")  # the id exists
    assert code == 0 and out.endswith("1 already existed\nkey other is held by no task\n")
    code, out, _ = _cli(capsys, queue_url, "add", "b", "--key", "user:42")
    assert code == 0 and out == "task b not added: key user:42 is held by task a\n"
    code, out, _ = _cli(capsys, queue_url, "add", "b", "--key", "user:42", "--on-key", "merge",
                        "--json")  # fmt: skip
    assert json.loads(out)["key"] == {"key": "user:42", "outcome": "merged", "holder": "a"}
    assert json.loads(out)["added"] == 0 and json.loads(out)["existed"] == 0
    code, out, _ = _cli(capsys, queue_url, "add", "c", "--key", "user:42", "--on-key",
                        "debounce", "--payload", "2", "--delay", "1h")  # fmt: skip
    assert code == 0 and "debounced" in out and out.endswith("held by task a\n")
    code, out, _ = _cli(capsys, queue_url, "show", "a")
    assert "key:          user:42\n" in out and "state:        WAITING\n" in out
    code, out, _ = _cli(capsys, queue_url, "list", "--json")
    assert [(t["task_id"], t["key"], t["payload"]) for t in json.loads(out)["tasks"]] == [
        ("a", "user:42", 2)
    ]
    for wrong in (["a", "b", "--key", "k"], ["d", "--on-key", "merge"], ["d", "--key", ""]):
        assert _cli(capsys, queue_url, "add", *wrong)[0] == 2


@pytest.mark.parametrize("new_url", ["postgresql"], indirect=True)
def test_a_debounce_whose_holder_a_concurrent_claim_took_is_refused(
    queue_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL another process may claim the holder between the add's lookup and
    its compare-and-set: the debounce then changes nothing, the add looks again, finds
    the holder RESERVED and refuses; the running task keeps its payload."""
    from sqlq.postgresql.backend import PostgresTransaction

    options = queue_options(queue_url)
    with (
        sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1, **options) as q,
        sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1, **options) as other,
    ):
        q.add("a", key="k", payload=1)
        lookup = PostgresTransaction.key_holder
        looked: list[Any] = []

        def then_claimed(self: Any, queue: str, key: str, cutoff: Any) -> Any:
            holder = lookup(self, queue, key, cutoff)
            if not looked:  # the first lookup's holder is claimed (and committed) at once
                assert other.claim() is not None
            looked.append(holder)
            return holder

        monkeypatch.setattr(PostgresTransaction, "key_holder", then_claimed)
        answer = q.add("b", key="k", payload=2, on_key="debounce")
        assert [h.state for h in looked] == ["AVAILABLE", "RESERVED"]
        assert answer == Added(Keyed.REFUSED, "a")
        info = q.info("a")
        assert (info.state, info.payload) == ("RESERVED", 1)
