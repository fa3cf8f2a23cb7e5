from django.apps import AppConfig


class GpusConfig(AppConfig):
    name = "dashboard.gpus"
    label = "gpus"
