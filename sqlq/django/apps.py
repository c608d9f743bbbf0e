"""The Django app of sqlq.django: ``"sqlq.django"`` in INSTALLED_APPS brings the
``sqlq_worker`` management command."""

from __future__ import annotations

from django.apps import AppConfig


class SqlqConfig(AppConfig):
    name = "sqlq.django"
    label = "sqlq"  # "django" would read as Django's own
    verbose_name = "sqlq"
