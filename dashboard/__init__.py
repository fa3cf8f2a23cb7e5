"""raywatch's Django project: settings, apps and the Celery app."""

from dashboard.celery import app as celery_app

__all__ = ["celery_app"]
