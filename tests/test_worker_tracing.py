"""A worker's OpenTelemetry spans (sqlq.worker.tracing), recorded by opentelemetry-sdk's
in-memory exporter, and its totals by outcome (sqlq.worker.metrics), both from one run
of a real Worker whose handler brings about every outcome."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

import sqlq
from sqlq.errors import InvalidConfig
from sqlq.records import Lease
from sqlq.worker import Worker

EXPORTER = InMemorySpanExporter()


class StateAtEnd(SpanProcessor):
    """Notes each task's state, read from the database when its span ends."""

    def __init__(self) -> None:
        self.queue: sqlq.Queue | None = None
        self.states: dict[int, str | None] = {}

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        if self.queue is not None and "sqlq.task.id" in attributes:
            task_id = str(attributes["sqlq.task.id"])
            self.states[int(str(attributes["sqlq.lease.token"]))] = self.queue.status(task_id)


STATES = StateAtEnd()


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    """The global tracer provider, as an application sets it, for this module's tests.
    The API lets a process set it once: the one a test before set (a README snippet
    does) is put aside and back, as opentelemetry-test-utils' reset_trace_globals does."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    tracer_provider.add_span_processor(STATES)
    before = trace._TRACER_PROVIDER_SET_ONCE, trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER_SET_ONCE, trace._TRACER_PROVIDER = Once(), None
    trace.set_tracer_provider(tracer_provider)
    yield
    trace._TRACER_PROVIDER_SET_ONCE, trace._TRACER_PROVIDER = before


@pytest.fixture
def db(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "jobs.db")
    EXPORTER.clear()
    STATES.states.clear()
    yield path
    STATES.queue = None


def _run_every_outcome(db: str) -> Worker:
    """A worker that runs tasks ending completed, retried then dead, lost then completed
    (its lease released under it, once), and cancelled; returned once it is idle."""
    other = sqlq.Queue(db, lease_seconds=30, max_attempts=1)
    STATES.queue = other
    other.add("ok", payload="ok", name="greet")
    other.add("bad", payload="fail", max_attempts=2)
    other.add("lose", payload="lose")
    other.add("stop", payload="cancel")
    tracer = trace.get_tracer("test")
    lost: set[str] = set()

    def handle(lease: Lease) -> None:
        with tracer.start_as_current_span("inside"):  # a child of the task's span
            if lease.payload == "fail":
                raise ValueError("failed on purpose")
            if lease.payload == "lose" and lease.task_id not in lost:
                lost.add(lease.task_id)
                assert other.release(lease.task_id, lease.token)  # the worker's report: refused
            if lease.payload == "cancel":
                other.cancel(lease.task_id)
                raise RuntimeError("stopped, as asked")

    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q:
        # No prefetch: a retried task is back in line when its span ends, not claimed
        # again by the same transaction.
        worker = Worker(q, handle, with_lease=True, metrics_port=0, tracing=True, prefetch=0)
        worker.run(stop_when_idle=True, install_signal_handlers=False)
    other.close()
    return worker


def test_a_span_per_task_run_ends_once_its_outcome_is_stored(db: str) -> None:
    _run_every_outcome(db)
    spans = EXPORTER.get_finished_spans()
    runs = [s for s in spans if s.name == "sqlq.task"]
    got = sorted(
        (
            str(a["sqlq.task.id"]),
            a["sqlq.task.attempt"],
            str(a["sqlq.outcome"]),
            STATES.states[int(str(a["sqlq.lease.token"]))]
            if a["sqlq.outcome"] != "lost"
            else "-",  # (back in line, or claimed again by then)
        )
        for s in runs
        if (a := s.attributes) is not None
    )
    assert got == [
        ("bad", 1, "retried", "AVAILABLE"),
        ("bad", 2, "dead", "DEAD"),
        ("lose", 1, "completed", "COMPLETED"),
        ("lose", 1, "lost", "-"),
        ("ok", 1, "completed", "COMPLETED"),
        ("stop", 1, "cancelled", "CANCELLED"),
    ]
    by_id = {(s.attributes or {})["sqlq.lease.token"]: s for s in runs}
    for span in runs:
        a = span.attributes or {}
        assert a["sqlq.queue"] == "default" and span.kind is trace.SpanKind.CONSUMER
        assert ("sqlq.task.name" in a) == (a["sqlq.task.id"] == "ok")
        failed = a["sqlq.outcome"] in ("retried", "dead", "lost")
        assert (span.status.status_code is trace.StatusCode.ERROR) == failed
        events = [e for e in span.events if e.name == "exception"]
        raised = a["sqlq.task.id"] in ("bad", "stop")
        assert [(e.attributes or {}).get("exception.type") for e in events] == (
            [("ValueError" if a["sqlq.task.id"] == "bad" else "RuntimeError")] if raised else []
        )
    inside = [s for s in spans if s.name == "inside"]
    assert len(inside) == len(runs)
    for child in inside:  # the handler's own spans are children of its task's
        assert child.parent is not None
        parent = next(s for s in by_id.values() if s.context.span_id == child.parent.span_id)
        assert parent.context.trace_id == child.context.trace_id


def test_a_worker_counts_its_tasks_by_outcome_and_name(db: str) -> None:
    worker = _run_every_outcome(db)
    assert worker.metrics is not None
    counts: dict[tuple[str, str], float] = {}
    for family in worker.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "sqlq_worker_tasks_total":
                key = (sample.labels["name"], sample.labels["outcome"])
                counts[key] = sample.value
    assert counts == {
        ("greet", "completed"): 1,
        ("", "completed"): 1,
        ("", "retried"): 1,
        ("", "dead"): 1,
        ("", "lost"): 1,
        ("", "cancelled"): 1,
    }


def test_without_tracing_a_worker_makes_no_span(db: str) -> None:
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q:
        q.add("ok")
        Worker(q, print).run(stop_when_idle=True, install_signal_handlers=False)
    assert EXPORTER.get_finished_spans() == ()


def test_tracing_must_be_a_bool(db: str) -> None:
    tracer: Any = trace.get_tracer("test")
    with (
        sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q,
        pytest.raises(InvalidConfig, match="tracing must be a bool"),
    ):
        Worker(q, print, tracing=tracer)


def test_an_async_handlers_spans_are_children_of_its_tasks(db: str) -> None:
    tracer = trace.get_tracer("test")

    async def handle(payload: object) -> None:
        with tracer.start_as_current_span("inside"):
            pass

    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q:
        q.add_many(["a", "b"])
        Worker(q, handle, concurrency=2, tracing=True).run(
            stop_when_idle=True, install_signal_handlers=False
        )
    spans = EXPORTER.get_finished_spans()
    runs = {s.context.span_id: s for s in spans if s.name == "sqlq.task"}
    inside = [s for s in spans if s.name == "inside"]
    assert len(runs) == len(inside) == 2
    parents = {child.parent.span_id for child in inside if child.parent is not None}
    assert parents == set(runs)


#: A handler module that sets up the global tracer provider as an application does,
#: exporting each span's name and attributes to the file named by SPANS as a JSON line.
TRACED = """
import json, os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

class ToFile(SpanExporter):
    def export(self, spans):
        with open(os.environ["SPANS"], "a") as out:
            for span in spans:
                out.write(json.dumps([span.name, dict(span.attributes)]) + "\\n")
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile()))
trace.set_tracer_provider(provider)

def handle(payload):
    pass
"""


@pytest.mark.processes
@pytest.mark.parametrize("traced", [True, False])
def test_sqlq_worker_tracing_makes_a_span_of_each_task_run(tmp_path: Path, traced: bool) -> None:
    import json
    import os
    import subprocess
    import sys

    db, spans = str(tmp_path / "jobs.db"), tmp_path / "spans.jsonl"
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q:
        q.add_many(["a", "b"])
    (tmp_path / "traced.py").write_text(TRACED)
    argv = [sys.executable, "-m", "sqlq", "worker", db, "traced:handle", "--burst"]
    done = subprocess.run(
        argv + (["--tracing"] if traced else []),
        cwd=tmp_path, env={**os.environ, "SPANS": str(spans)}, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = [json.loads(line) for line in spans.read_text().splitlines()] if traced else []
    assert not spans.exists() or traced
    assert sorted((name, a["sqlq.task.id"], a["sqlq.outcome"]) for name, a in found) == (
        [("sqlq.task", "a", "completed"), ("sqlq.task", "b", "completed")] if traced else []
    )
