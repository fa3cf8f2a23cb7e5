from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "dashboard.alerts"
    label = "alerts"
