from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "dashboard.core"
    label = "core"
    verbose_name = "raywatch core"

    def ready(self) -> None:
        # Connect their receivers: the failed-login counters; role changes told to sockets.
        from dashboard.core import login, rolechanges  # noqa: F401
