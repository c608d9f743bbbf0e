"""``python manage.py sqlq_worker``: run a sqlq worker on a queue of a TASKS backend."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from sqlq.django import add_worker_arguments, run_worker, worker_options


class Command(BaseCommand):
    help = (
        "Run the project's Django tasks of one queue with a sqlq worker, until SIGTERM or "
        "Ctrl-C (running tasks then get --grace seconds to finish)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_worker_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        run_worker(**worker_options(options))
