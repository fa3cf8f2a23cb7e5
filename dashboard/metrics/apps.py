from django.apps import AppConfig


class MetricsConfig(AppConfig):
    """/metrics: raywatch's view in the Prometheus text format, read from the other apps
    at each scrape (it imports them; none imports it)."""

    name = "dashboard.metrics"
    label = "metrics"
