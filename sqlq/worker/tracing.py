"""A worker's OpenTelemetry traces: ``Worker(queue, handler, tracing=True)`` makes a span
of each task it runs (the ``otel`` extra: opentelemetry-api).

Spans come from the global tracer provider (``opentelemetry.trace.set_tracer_provider``,
or ``opentelemetry-instrument``), as OpenTelemetry asks of a library: the application
chooses the SDK, its exporters and sampling; without one, the API's spans cost next to
nothing.  A worker without ``tracing`` imports nothing of this and makes no span.

One span, ``sqlq.task`` (kind CONSUMER), per lease a handler runs: it starts when the
worker hands the task to a handler, is the current span while the handler runs (the
handler's own spans are its children), and ends once the outcome is stored (the
transaction that reports it has committed), or once the worker gives the task up.
Attributes: ``sqlq.queue``, ``sqlq.task.id``, ``sqlq.task.name`` (when it has one),
``sqlq.task.attempt``, ``sqlq.lease.token``, and at its end ``sqlq.outcome``, the
outcome of ``sqlq_worker_tasks_total`` (sqlq.worker.metrics): ``completed``,
``retried``, ``dead``, ``cancelled``, ``lost``, ``released``, or ``abandoned`` (the
worker stopped before its outcome could be stored).  A handler's exception is recorded
on the span (an ``exception`` event), and the span's status is then ERROR.
"""

from __future__ import annotations

from typing import Any

from ..contract import describe_error
from ..errors import InvalidConfig
from ..install import pip_install
from ..records import Lease

#: The outcomes that end a span with status ERROR.
FAILED = frozenset({"retried", "dead", "lost", "abandoned"})


class TaskTracer:
    """The spans of one worker's running tasks, by lease token."""

    def __init__(self, queue: str) -> None:
        try:
            from opentelemetry import context, trace
        except ImportError:
            raise InvalidConfig(f"tracing needs opentelemetry-api: {pip_install('otel')}") from None
        self.queue = queue
        self._trace = trace
        self._context = context
        self._tracer = trace.get_tracer("sqlq")
        self._spans: dict[int, Any] = {}  # (dict operations are atomic: no lock)

    def start(self, lease: Lease) -> None:
        """A handler is about to run ``lease``'s task."""
        attributes: dict[str, str | int] = {
            "sqlq.queue": self.queue,
            "sqlq.task.id": lease.task_id,
            "sqlq.task.attempt": lease.attempt,
            "sqlq.lease.token": lease.token,
        }
        if lease.name is not None:
            attributes["sqlq.task.name"] = lease.name
        kind = self._trace.SpanKind.CONSUMER
        self._spans[lease.token] = self._tracer.start_span(
            "sqlq.task", kind=kind, attributes=attributes
        )

    def enter(self, lease: Lease) -> None:
        """Make the lease's span the current one, in the context of the job that runs
        its handler (its own: nothing to restore)."""
        span = self._spans.get(lease.token)
        if span is not None:
            self._context.attach(self._trace.set_span_in_context(span))

    def end(self, lease: Lease, outcome: str, error: BaseException | None = None) -> None:
        """The worker is done with the lease: its outcome is stored (or given up)."""
        span = self._spans.pop(lease.token, None)
        if span is None:
            return
        span.set_attribute("sqlq.outcome", outcome)
        why = outcome if error is None else describe_error(error)
        if error is not None:
            try:
                span.record_exception(error)
            except BaseException:  # a handler's exception whose str() or __class__ raises
                attributes = {"exception.type": why.partition(":")[0], "exception.message": why}
                span.add_event("exception", attributes)
        if outcome in FAILED:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, why))
        span.end()
