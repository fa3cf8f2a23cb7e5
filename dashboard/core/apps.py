from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "dashboard.core"
    label = "core"
    verbose_name = "raywatch core"
