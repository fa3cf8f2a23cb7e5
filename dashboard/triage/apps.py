from django.apps import AppConfig


class TriageConfig(AppConfig):
    """The home page: what needs an operator now, gathered from the other apps (it
    imports them; none imports it)."""

    name = "dashboard.triage"
    label = "triage"
