"""Views that enqueue tasks and read results back, through Django's API alone."""

from __future__ import annotations

import json
from datetime import timedelta

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from shop import tasks


@csrf_exempt
def enqueue(request: HttpRequest, name: str) -> JsonResponse:
    body = json.loads(request.body or b"{}")
    task = getattr(tasks, name)
    if "priority" in body:
        task = task.using(priority=body["priority"])
    if "delay" in body:
        task = task.using(run_after=timezone.now() + timedelta(seconds=body["delay"]))
    result = task.enqueue(*body.get("args", []), **body.get("kwargs", {}))
    return JsonResponse({"id": result.id, "status": result.status})


@csrf_exempt
def enqueue_rolled_back(request: HttpRequest) -> JsonResponse:
    ids = []
    try:
        with transaction.atomic():
            ids.append(tasks.record.enqueue("committed-then-rolled-back").id)
            raise RuntimeError("the view changed its mind")
    except RuntimeError:
        pass
    with transaction.atomic():
        ids.append(tasks.record.enqueue("committed").id)
    return JsonResponse({"rolled_back": ids[0], "committed": ids[1]})


def result(request: HttpRequest, name: str, result_id: str) -> JsonResponse:
    found = getattr(tasks, name).get_result(result_id)
    answer = {
        "id": found.id,
        "status": found.status,
        "attempts": found.attempts,
        "errors": [
            {"class": e.exception_class_path, "traceback": e.traceback} for e in found.errors
        ],
        "enqueued_at": found.enqueued_at and found.enqueued_at.timestamp(),
        "finished_at": found.finished_at and found.finished_at.timestamp(),
        "priority": found.task.priority,
        "queue_name": found.task.queue_name,
    }
    if found.is_finished and found.status == "SUCCESSFUL":
        answer["return_value"] = found.return_value
    return JsonResponse(answer)
