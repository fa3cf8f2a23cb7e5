from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "dashboard.core"
    label = "core"
    verbose_name = "raywatch core"

    def ready(self) -> None:
        from dashboard.core import login  # noqa: F401 - connects the failed-login counters
