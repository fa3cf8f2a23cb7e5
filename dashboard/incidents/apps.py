from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "dashboard.incidents"
    label = "incidents"
