"""The Celery app. Worker: `celery -A dashboard worker`; beat: `celery -A dashboard beat`."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("raywatch")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
