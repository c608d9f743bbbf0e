"""sqlq as a backend of Django's Tasks framework (``django.tasks``, Django 6.1 and newer).

Settings::

    INSTALLED_APPS = [..., "sqlq.django"]          # the sqlq_worker command
    TASKS = {"default": {"BACKEND": "sqlq.django.Backend",
                         "OPTIONS": {"DATABASE": "default"}}}   # or "URL": "tasks.db"

A Django task becomes one sqlq task: its id is the TaskResult's id, its name the
task's import path (``Task.module_path``), its payload ``{"args": [...], "kwargs":
{...}}``, its sqlq queue the task's ``queue_name``, its priority the task's (Django's
-100..100 is a part of sqlq's -1000..1000, taken as it is) and ``run_after`` its
``run_at``.  A worker (``manage.py sqlq_worker``, or ``sqlq worker
--django-settings``) imports each task by that path and calls it; what it returns
is the task's result.  See docs/how-to/django.md.
"""

from __future__ import annotations

# The package's names, each from the module of its job (``X as X``: a re-export).
from .backend import DEFAULTS as DEFAULTS
from .backend import Backend as Backend
from .connections import database_url as database_url
from .results import RAISED as RAISED
from .results import STATUSES as STATUSES
from .results import FinalTaskFailed as FinalTaskFailed
from .results import TaskFailed as TaskFailed
from .results import WorkerError as WorkerError
from .results import django_status as django_status
from .results import sqlq_priority as sqlq_priority
from .results import task_error as task_error
from .worker import Runner as Runner
from .worker import add_worker_arguments as add_worker_arguments
from .worker import backend_named as backend_named
from .worker import run_worker as run_worker
from .worker import setup as setup
from .worker import worker_options as worker_options

__all__ = ["Backend", "TaskFailed", "WorkerError", "django_status", "run_worker", "sqlq_priority"]
