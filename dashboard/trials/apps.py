from django.apps import AppConfig


class TrialsConfig(AppConfig):
    name = "dashboard.trials"
    label = "trials"
