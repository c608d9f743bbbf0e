"""Settings of the Django project of tests/test_django.py, from the environment:
SQLQ_DJANGO_DB, the project's database (a SQLite file path or a PostgreSQL URL), and
SQLQ_DJANGO_QUEUE, the queue's OPTIONS: "default" (the same database) or a URL."""

from __future__ import annotations

import os
import sys

import sqlalchemy as sa

DATABASE = os.environ["SQLQ_DJANGO_DB"]
QUEUE = os.environ.get("SQLQ_DJANGO_QUEUE", "default")

STANDARD_SQLITE = os.environ.get("SQLQ_DJANGO_STANDARD_SQLITE") == "1"  # (a test's)

if "://" not in DATABASE and QUEUE == "default" and not STANDARD_SQLITE:
    # The queue shares Django's SQLite file: Django must use sqlq's SQLite library
    # (docs/how-to/django.md), before anything imports the standard one.
    import pysqlite3.dbapi2

    sys.modules["sqlite3"] = pysqlite3
    sys.modules["sqlite3.dbapi2"] = pysqlite3.dbapi2


def _database(url: str) -> dict[str, object]:
    if "://" not in url:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url}
    parsed = sa.make_url(url)
    query = dict(parsed.query)
    host = query.pop("host", None) or parsed.host or ""
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.database,
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": host,
        "PORT": str(parsed.port or ""),
        "OPTIONS": query,
    }


SECRET_KEY = "test only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "mysite.urls"
INSTALLED_APPS = ["sqlq.django", "shop"]
MIDDLEWARE: list[str] = []
DATABASES = {"default": _database(DATABASE)}
TASKS = {
    "default": {
        "BACKEND": "sqlq.django.Backend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            **({"DATABASE": "default"} if QUEUE == "default" else {"URL": QUEUE}),
            "LEASE_SECONDS": float(os.environ.get("SQLQ_DJANGO_LEASE", "30")),
        },
    }
}
