"""Runs steps against the test project in one process and prints their answers as JSON:
requests through Django's test client ({"path": ..., "body": ...}: a POST with a JSON
body; without "body", a GET) and snippets of Python ({"code": ...}, whose ``answer``
is printed).  Used by tests/test_django.py."""

import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django.setup()

from django.test import Client  # noqa: E402

client = Client()
answers = []
for step in json.loads(sys.argv[1]):
    if "code" in step:
        scope: dict[str, object] = {}
        exec(step["code"], scope)
        answers.append(scope.get("answer"))
    elif "body" in step:
        response = client.post(step["path"], step["body"], content_type="application/json")
        answers.append({"code": response.status_code, **response.json()})
    else:
        response = client.get(step["path"])
        answers.append({"code": response.status_code, **response.json()})
print(json.dumps(answers))
