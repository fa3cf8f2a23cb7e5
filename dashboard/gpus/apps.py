from django.apps import AppConfig


class GpusConfig(AppConfig):
    name = "dashboard.gpus"
    label = "gpus"

    def ready(self) -> None:
        from dashboard.core.push import GPUS_GROUP, SCOPED
        from dashboard.gpus.views_data import narrow_gpus

        SCOPED[GPUS_GROUP] = narrow_gpus  # a page scoped to one cluster: its GPUs only
